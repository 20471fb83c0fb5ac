"""Runner API URLs, mounted at /api/v1/runner/."""

from django.urls import path

from runs import api

urlpatterns = [
    path("runs/<int:run_id>/", api.RunRootView.as_view(), name="runner-api-root"),
    path("runs/<int:run_id>/start", api.StartView.as_view(), name="runner-api-start"),
    path("runs/<int:run_id>/heartbeat", api.HeartbeatView.as_view(), name="runner-api-heartbeat"),
    path(
        "runs/<int:run_id>/qualification",
        api.QualificationView.as_view(),
        name="runner-api-qualification",
    ),
    path("runs/<int:run_id>/uploads", api.UploadsView.as_view(), name="runner-api-uploads"),
    path("runs/<int:run_id>/blobs", api.BlobView.as_view(), name="runner-api-blobs"),
    path("runs/<int:run_id>/trials", api.TrialsView.as_view(), name="runner-api-trials"),
    path("runs/<int:run_id>/shards", api.ShardsView.as_view(), name="runner-api-shards"),
    path("runs/<int:run_id>/complete", api.CompleteView.as_view(), name="runner-api-complete"),
    path("runs/<int:run_id>/fail", api.FailView.as_view(), name="runner-api-fail"),
]
