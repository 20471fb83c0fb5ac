from django.contrib import admin
from django.urls import include, path

from config import health, views

urlpatterns = [
    path("health", health.health, name="health"),
    path("files/<str:alias>/", views.signed_file, name="signed-file"),
    path("admin/", admin.site.urls),
    path("", include("leaderboard.urls")),
]
