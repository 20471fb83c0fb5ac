from django.urls import path

from leaderboard import api, receipt_views, timeline_api

urlpatterns = [
    path("models/", api.ModelListApi.as_view(), name="public-api-models"),
    path("models/<str:slug>/", api.ModelDetailApi.as_view(), name="public-api-model"),
    path("hardware/", api.HardwareListApi.as_view(), name="public-api-hardware-list"),
    path("hardware/<str:slug>/", api.HardwareDetailApi.as_view(), name="public-api-hardware"),
    path("results/", api.ResultListApi.as_view(), name="public-api-results"),
    path("results/<int:pk>/", api.ResultDetailApi.as_view(), name="public-api-result"),
    path(
        "results/<int:pk>/trials/<int:index>/timeline/",
        timeline_api.ResultTrialTimelineApi.as_view(),
        name="public-api-result-timeline",
    ),
    path(
        "results/<int:pk>/receipt/",
        receipt_views.ResultReceiptApi.as_view(),
        name="public-api-result-receipt",
    ),
    path("keys/", receipt_views.KeysApi.as_view(), name="public-api-receipt-keys"),
    path("compare/", api.CompareApi.as_view(), name="public-api-compare"),
    path("twin/accuracy/", api.TwinAccuracyApi.as_view(), name="public-api-twin-accuracy"),
]
