"""/api/v1/ — the vendor API (mounted by config.urls)."""

from django.urls import path

from portal.api import openapi, views

app_name = "vendor-api"
_ = openapi  # registers the token scheme with drf-spectacular

urlpatterns = [
    path(
        "schema/deployment-config.json",
        views.DeploymentConfigSchemaView.as_view(),
        name="deployment-config-schema",
    ),
    path("submissions/", views.SubmissionListCreateView.as_view(), name="submission-list"),
    path("submissions/<int:pk>/", views.SubmissionDetailView.as_view(), name="submission-detail"),
    path(
        "submissions/<int:pk>/withdraw/",
        views.SubmissionWithdrawView.as_view(),
        name="submission-withdraw",
    ),
    path(
        "submissions/<int:pk>/resubmit/",
        views.SubmissionResubmitView.as_view(),
        name="submission-resubmit",
    ),
    path("submissions/<int:pk>/runs/", views.SubmissionRunsView.as_view(), name="submission-runs"),
    path(
        "submissions/<int:pk>/attachments/",
        views.SubmissionAttachmentsView.as_view(),
        name="submission-attachments",
    ),
    path(
        "submissions/<int:pk>/attachments/<int:attachment_pk>/verify/",
        views.AttachmentVerifyView.as_view(),
        name="attachment-verify",
    ),
    path("uploads/<str:token>/", views.SignedUploadView.as_view(), name="signed-upload"),
    path("runs/<int:pk>/", views.RunDetailView.as_view(), name="run-detail"),
    path(
        "runs/<int:pk>/verification/",
        views.RunVerificationView.as_view(),
        name="run-verification",
    ),
    path("runs/<int:pk>/raw-records/", views.RunRawRecordsView.as_view(), name="run-raw-records"),
    path("datasets/", views.DatasetListView.as_view(), name="dataset-list"),
    path(
        "datasets/<int:pk>/download/",
        views.DatasetDownloadView.as_view(),
        name="dataset-download",
    ),
]
