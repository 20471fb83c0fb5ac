from django.urls import include, path

from leaderboard import views

urlpatterns = [
    path("", views.home, name="home"),
    path("models/", views.model_list, name="model-list"),
    path("models/<str:slug>/", views.model_detail, name="model-detail"),
    path("hardware/", views.hardware_list, name="hardware-list"),
    path("hardware/<str:slug>/", views.hardware_detail, name="hardware-detail"),
    path("results/<int:pk>/", views.result_detail, name="result-detail"),
    path("results/<int:pk>/raw/<int:artifact_pk>/", views.result_raw_data, name="result-raw-data"),
    path("compare/", views.compare, name="compare"),
    path("history/<str:model_slug>/<str:hardware_slug>/", views.history, name="history"),
    path("methodology/", views.methodology, name="methodology"),
    path("data/", views.data, name="data"),
    path("data/latest/<str:name>", views.data_file, name="data-file"),
    path("api/v1/public/", include("leaderboard.api_urls")),
]
