from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from core import health, views

urlpatterns = [
    path("health", health.health, name="health"),
    path("files/<str:alias>/", views.signed_file, name="signed-file"),
    path("admin/", admin.site.urls),
    path("api/v1/runner/", include("runs.urls")),
    path("", include("ladders.urls")),
    path("api/v1/", include("portal.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # the split view serves its start-up script as a file: no inline script under the CSP
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(template_name="portal/login.html"),
        name="login",
    ),
    path("accounts/", include("django.contrib.auth.urls")),
    path("portal/", include("portal.web.urls")),
    path("review/", include("review.urls")),
    path("", include("leaderboard.urls")),
]

# Errors outside a DRF view (no route, a malformed request) under /api/ keep the API's
# error shape (core.api_errors).
handler400 = "core.views.bad_request"
handler404 = "core.views.not_found"
handler500 = "core.views.server_error"
