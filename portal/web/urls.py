from django.urls import path

from portal.web import views

app_name = "portal"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("submit/", views.submit, name="submit"),
    path("submissions/<int:pk>/", views.detail, name="detail"),
    path("submissions/<int:pk>/status.json", views.status_json, name="status"),
    path("submissions/<int:pk>/withdraw/", views.withdraw, name="withdraw"),
]
