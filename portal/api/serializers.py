"""Input and output serializers, one pair per operation. No business logic here."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from runs.models import latest_of
from runs.progress import run_progress
from submissions.models import Artifact, Submission

PROGRESS_HELP = (
    "queued: queue, queue_position (1 = next), runs_ahead, estimated_start_s (null without "
    "history) and estimate_basis; running: phase, search_phase, trial k of max_trials, "
    "concurrency, last_trial; finished: phase and search_phase = done | failed | cancelled"
)


class ProgressMixin(serializers.Serializer):
    progress = serializers.SerializerMethodField(help_text=PROGRESS_HELP)

    @extend_schema_field(serializers.JSONField())
    def get_progress(self, obj) -> dict:
        return run_progress(obj)


class LatestRunSerializer(ProgressMixin):
    id = serializers.IntegerField()
    status = serializers.CharField()
    heartbeat_at = serializers.DateTimeField(allow_null=True)


class PublishedResultSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField(help_text="published, superseded or invalidated")
    label = serializers.CharField()
    url = serializers.CharField(help_text="the public result page")
    api_url = serializers.CharField(help_text="the public read API's result")


def published_result(submission: Submission, request=None) -> dict | None:
    """The public result of a published (or since retired) submission; None before."""
    from django.urls import reverse

    try:
        result = submission.result  # reverse one-to-one; missing raises DoesNotExist
    except Submission.result.RelatedObjectDoesNotExist:
        return None
    url = reverse("result-detail", args=[result.pk])
    api_url = reverse("public-api-result", args=[result.pk])
    if request is not None:
        url, api_url = request.build_absolute_uri(url), request.build_absolute_uri(api_url)
    return {
        "id": result.pk,
        "status": result.status,
        "label": result.label,
        "url": url,
        "api_url": api_url,
    }


class SubmissionListSerializer(serializers.ModelSerializer):
    model = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    hardware = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    latest_run = serializers.SerializerMethodField()
    result = serializers.SerializerMethodField(
        help_text="the published result's id and URLs once published; null before"
    )

    class Meta:
        model = Submission
        fields = [
            "id",
            "status",
            "status_reason",
            "status_changed_at",
            "model",
            "hardware",
            "source",
            "is_simulated",
            "previous",
            "created_at",
            "latest_run",
            "result",
        ]
        read_only_fields = fields

    @extend_schema_field(LatestRunSerializer(allow_null=True))
    def get_latest_run(self, obj: Submission) -> dict | None:
        run = latest_of(obj.runs.all())  # the list view prefetches the runs
        if run is None:
            return None
        return LatestRunSerializer(run).data

    @extend_schema_field(PublishedResultSerializer(allow_null=True))
    def get_result(self, obj: Submission) -> dict | None:
        return published_result(obj, self.context.get("request"))


class SubmissionDetailSerializer(SubmissionListSerializer):
    runs = serializers.PrimaryKeyRelatedField(many=True, read_only=True)
    resubmissions = serializers.PrimaryKeyRelatedField(many=True, read_only=True)

    class Meta(SubmissionListSerializer.Meta):
        fields = [
            *SubmissionListSerializer.Meta.fields,
            "updated_at",
            "schema_version",
            "config",
            "config_sha256",
            "runs",
            "resubmissions",
        ]
        read_only_fields = fields


class WithdrawInputSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000)


class TrialSerializer(serializers.Serializer):
    """A stored trial, its documents read through the contract (docs/pipeline.md "The
    contract"): metrics = the engine's trial summary and extras, one verdict per tier."""

    index = serializers.IntegerField()
    concurrency = serializers.IntegerField()
    phase = serializers.CharField()
    metrics = serializers.SerializerMethodField()
    verdicts = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()

    @extend_schema_field(serializers.JSONField())
    def get_metrics(self, obj) -> dict:
        return obj.summary.dump()

    @extend_schema_field(serializers.JSONField())
    def get_verdicts(self, obj) -> dict:
        return {name: v.dump() for name, v in obj.tier_verdicts.items()}


class RunSerializer(ProgressMixin):
    id = serializers.IntegerField()
    submission = serializers.IntegerField(source="submission_id")
    status = serializers.CharField()
    attempt = serializers.IntegerField()
    search_summary = serializers.SerializerMethodField()
    heartbeat_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField()
    trials = TrialSerializer(many=True)

    @extend_schema_field(serializers.JSONField())
    def get_search_summary(self, obj) -> dict:
        """{} until the run completed; else the engine's search result (contract)."""
        return obj.summary.dump() if obj.summary else {}


class VerificationSerializer(serializers.Serializer):
    run = serializers.IntegerField(source="run_id")
    status = serializers.CharField()
    checks = serializers.JSONField()
    created_at = serializers.DateTimeField()


class DownloadSerializer(serializers.Serializer):
    name = serializers.CharField()
    url = serializers.CharField()
    sha256 = serializers.CharField(allow_blank=True)
    size = serializers.IntegerField(allow_null=True)
    expires_in = serializers.IntegerField()


class RawRecordsSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    files = DownloadSerializer(many=True)


class AttachmentInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    size = serializers.IntegerField(min_value=1)
    sha256 = serializers.RegexField(r"^[0-9a-fA-F]{64}$")
    content_type = serializers.CharField(max_length=100, default="application/octet-stream")


class AttachmentSerializer(serializers.ModelSerializer):
    class Meta:
        model = Artifact
        fields = ["id", "name", "size", "sha256", "content_type", "verified_at", "created_at"]
        read_only_fields = fields


class UploadGrantSerializer(serializers.Serializer):
    attachment = AttachmentSerializer(source="artifact")
    method = serializers.ChoiceField(choices=["POST", "PUT"])
    url = serializers.CharField()
    fields = serializers.DictField(child=serializers.CharField())
    headers = serializers.DictField(child=serializers.CharField())
    expires_in = serializers.IntegerField()


class DatasetSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    version = serializers.CharField()
    sha256 = serializers.CharField()
    size = serializers.IntegerField()
    stats = serializers.JSONField()
    created_at = serializers.DateTimeField()
