from django.urls import include, path

from leaderboard import embed, llms, receipt_views, views

urlpatterns = [
    path("", views.home, name="home"),
    path("models/", views.model_list, name="model-list"),
    path("models/<str:slug>/", views.model_detail, name="model-detail"),
    path("hardware/", views.hardware_list, name="hardware-list"),
    path("hardware/<str:slug>/", views.hardware_detail, name="hardware-detail"),
    path("results/<int:pk>/", views.result_detail, name="result-detail"),
    path("results/<int:pk>/raw/<int:artifact_pk>/", views.result_raw_data, name="result-raw-data"),
    # the signed measurement receipt and its keys (docs/verification.md "Receipt")
    path(
        "results/<int:pk>/receipt.json",
        receipt_views.result_receipt_file,
        name="result-receipt-file",
    ),
    path(".well-known/agentperf-keys.json", receipt_views.keys_json, name="receipt-keys"),
    path("compare/", views.compare, name="compare"),
    path("history/<str:model_slug>/<str:hardware_slug>/", views.history, name="history"),
    path("methodology/", views.methodology, name="methodology"),
    path("twin/accuracy/", views.twin_accuracy, name="twin-accuracy"),
    path("data/", views.data, name="data"),
    path("data/latest/<str:name>", views.data_file, name="data-file"),
    path("api/v1/public/", include("leaderboard.api_urls")),
    # machines as readers (docs/api.md "llms.txt", "Embeds")
    path("llms.txt", llms.llms_txt, name="llms-txt"),
    path("embed/models/<str:slug>/", embed.model_embed, name="embed-model"),
    path(
        "embed/models/<str:slug>/frontier.<str:fmt>",
        embed.model_image,
        name="embed-model-image",
    ),
    path(
        "embed/hardware/<str:slug>/frontier.<str:fmt>",
        embed.hardware_image,
        name="embed-hardware-image",
    ),
    path(
        "embed/results/<int:pk>/frontier.<str:fmt>", embed.result_image, name="embed-result-image"
    ),
]
