from django.urls import path

from leaderboard import views

urlpatterns = [
    path("", views.home, name="home"),
    path("models/", views.model_list, name="model-list"),
    path("models/<str:slug>/", views.model_detail, name="model-detail"),
    path("hardware/", views.hardware_list, name="hardware-list"),
    path("hardware/<str:slug>/", views.hardware_detail, name="hardware-detail"),
]
