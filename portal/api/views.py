"""Vendor API views: thin, org-scoped (another org's objects are 404, never 403)."""

from __future__ import annotations

import re

from django.core.files.storage import storages
from django.db.models import Prefetch
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog.models import Dataset
from core.api_errors import ApiError
from core.throttles import AnonThrottle
from portal.api import serializers as s
from portal.api.access import IsVendor, VendorSubmitThrottle, VendorThrottle, request_org
from portal.api.openapi import CONFIG_REF
from portal.api.parsers import RawConfigParser
from runs.models import BenchmarkRun, Trial, VerificationReport
from submissions.models import Artifact, Submission
from submissions.schema import ConfigError, config_json_schema
from submissions.services.artifacts import artifact_storage
from submissions.services.attachments import (
    AttachmentError,
    attachment_presign,
    attachment_receive,
    attachment_verify,
)
from submissions.services.lifecycle import TransitionError
from submissions.services.submissions import (
    IdempotencyConflict,
    Submitted,
    submission_resubmit,
    submission_submit,
    submission_withdraw,
)

DOWNLOAD_EXPIRES_S = 900
CONFIG_STATUS = {"too_large": 413, "unsupported_media_type": 415}
ERROR_RESPONSES = {
    400: OpenApiResponse(description="invalid input; `error.fields` names each field path"),
    401: OpenApiResponse(description="no or invalid credentials"),
    403: OpenApiResponse(description="not a vendor organization member, or token lacks scope"),
    404: OpenApiResponse(description="no such object in your organization"),
}
IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="Same key + the same config (compared parsed, so YAML and JSON of one "
    "config match) returns the first submission; another config is a 409.",
)
# Both encodings carry the same document: the deployment-config schema (a component added
# by portal.api.openapi.deployment_config_components).
CONFIG_BODY = {"application/yaml": CONFIG_REF, "application/json": CONFIG_REF}


def config_api_error(exc: ConfigError) -> ApiError:
    return ApiError(
        exc.code, exc.message, status_code=CONFIG_STATUS.get(exc.code, 400), fields=exc.fields
    )


def get_object_or_404(queryset, **lookup):
    """The object, or a NotFound in the API error shape (never a hint that it exists)."""
    obj = queryset.filter(**lookup).first()
    if obj is None:
        raise exceptions.NotFound("No such object in your organization.")
    return obj


def attachment_api_error(exc: AttachmentError) -> ApiError:
    code = {413: "too_large", 403: "forbidden", 404: "not_found", 409: "conflict"}
    return ApiError(
        code.get(exc.status, "invalid"),
        str(exc),
        status_code=exc.status,
        fields={exc.field: [str(exc)]},
    )


def _actor(request: Request):
    return request.user


class VendorView(APIView):
    permission_classes = [IsVendor]
    throttle_classes = [VendorThrottle]

    @property
    def org(self):
        return request_org(self.request)

    def own_submissions(self):
        return Submission.objects.filter(org=self.org).select_related("model", "hardware", "result")

    def own_submission(self, pk: int) -> Submission:
        return get_object_or_404(self.own_submissions(), pk=pk)

    def own_run(self, pk: int) -> BenchmarkRun:
        return get_object_or_404(BenchmarkRun.objects.filter(submission__org=self.org), pk=pk)


IDEMPOTENCY_KEY_MAX = 200  # Submission.idempotency_key's column
_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]+")  # visible ASCII, as HTTP tokens are


def idempotency_key(request: Request) -> str | None:
    """The Idempotency-Key header, or a 400 naming it (docs/security.md "Input limits")."""
    key = request.headers.get("Idempotency-Key")
    if not key:
        return None
    problem = None
    if len(key) > IDEMPOTENCY_KEY_MAX:
        problem = f"at most {IDEMPOTENCY_KEY_MAX} characters (got {len(key)})"
    elif not _IDEMPOTENCY_KEY.fullmatch(key):
        problem = "only visible ASCII characters (no spaces or control characters)"
    if problem:
        raise ApiError(
            "invalid_header",
            f"the Idempotency-Key header must be {problem}",
            fields={"Idempotency-Key": [problem]},
        )
    return key


def _config_request(request: Request) -> tuple[bytes, str, str | None]:
    key = idempotency_key(request)  # before the body is read: nothing stored either way
    body = request.data if isinstance(request.data, bytes) else b""
    return body, request.content_type or "", key


class SubmissionListCreateView(VendorView):
    parser_classes = [RawConfigParser]
    throttle_classes = [VendorThrottle, VendorSubmitThrottle]

    @extend_schema(
        operation_id="submissions_list",
        responses={200: s.SubmissionListSerializer(many=True), **ERROR_RESPONSES},
    )
    def get(self, request: Request) -> Response:
        qs = self.own_submissions().prefetch_related(
            Prefetch("runs", queryset=BenchmarkRun.objects.latest_first())
        )
        status_filter = request.query_params.get("status")
        if status_filter:
            qs = qs.filter(status=status_filter)
        return Response(s.SubmissionListSerializer(qs[:500], many=True, context=_ctx(request)).data)

    @extend_schema(
        operation_id="submissions_create",
        request=CONFIG_BODY,
        parameters=[IDEMPOTENCY_HEADER],
        responses={
            201: s.SubmissionDetailSerializer,
            200: OpenApiResponse(s.SubmissionDetailSerializer, description="idempotent replay"),
            409: OpenApiResponse(description="idempotency key reused with another config"),
            413: OpenApiResponse(description="config larger than the limit"),
            **ERROR_RESPONSES,
        },
        description="Submit a deployment config (YAML or JSON, see "
        "/api/v1/schema/deployment-config.json).",
    )
    def post(self, request: Request) -> Response:
        body, content_type, key = _config_request(request)
        try:
            submitted = submission_submit(
                org=self.org,
                config_text=body,
                content_type=content_type,
                idempotency_key=key,
                created_by=_actor(request),
            )
        except ConfigError as exc:
            raise config_api_error(exc) from None
        except IdempotencyConflict as exc:
            raise ApiError("idempotency_conflict", str(exc), status_code=409) from None
        return _submission_response(submitted, request)


def _ctx(request: Request) -> dict:
    return {"request": request}


def _submission_response(submitted: Submitted, request: Request) -> Response:
    response = Response(
        s.SubmissionDetailSerializer(submitted.submission, context=_ctx(request)).data,
        status=status.HTTP_200_OK if submitted.replayed else status.HTTP_201_CREATED,
    )
    if submitted.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


class SubmissionDetailView(VendorView):
    @extend_schema(
        operation_id="submissions_retrieve",
        responses={200: s.SubmissionDetailSerializer, **ERROR_RESPONSES},
    )
    def get(self, request: Request, pk: int) -> Response:
        return Response(
            s.SubmissionDetailSerializer(self.own_submission(pk), context=_ctx(request)).data
        )


class SubmissionWithdrawView(VendorView):
    @extend_schema(
        operation_id="submissions_withdraw",
        request=s.WithdrawInputSerializer,
        responses={
            200: s.SubmissionDetailSerializer,
            409: OpenApiResponse(description="already published or decided"),
            **ERROR_RESPONSES,
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        submission = self.own_submission(pk)
        data = s.WithdrawInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            submission_withdraw(
                submission=submission,
                actor=_actor(request),
                reason=data.validated_data.get("reason", ""),
            )
        except TransitionError as exc:
            raise ApiError("conflict", str(exc), status_code=409) from None
        return Response(
            s.SubmissionDetailSerializer(self.own_submission(pk), context=_ctx(request)).data
        )


class SubmissionResubmitView(VendorView):
    parser_classes = [RawConfigParser]
    throttle_classes = [VendorThrottle, VendorSubmitThrottle]

    @extend_schema(
        operation_id="submissions_resubmit",
        request=CONFIG_BODY,
        parameters=[IDEMPOTENCY_HEADER],
        responses={
            201: s.SubmissionDetailSerializer,
            200: OpenApiResponse(s.SubmissionDetailSerializer, description="idempotent replay"),
            409: OpenApiResponse(description="idempotency key reused with another config"),
            **ERROR_RESPONSES,
        },
        description="A new submission linked to this one; this one is withdrawn if still live.",
    )
    def post(self, request: Request, pk: int) -> Response:
        previous = self.own_submission(pk)
        body, content_type, key = _config_request(request)
        try:
            submitted = submission_resubmit(
                previous=previous,
                config_text=body,
                content_type=content_type,
                idempotency_key=key,
                created_by=_actor(request),
            )
        except ConfigError as exc:
            raise config_api_error(exc) from None
        except IdempotencyConflict as exc:
            raise ApiError("idempotency_conflict", str(exc), status_code=409) from None
        return _submission_response(submitted, request)


def _run_queryset():
    return BenchmarkRun.objects.prefetch_related(
        Prefetch("trials", queryset=Trial.objects.order_by("index"))
    )


class SubmissionRunsView(VendorView):
    @extend_schema(
        operation_id="submissions_runs",
        responses={200: s.RunSerializer(many=True), **ERROR_RESPONSES},
    )
    def get(self, request: Request, pk: int) -> Response:
        submission = self.own_submission(pk)
        runs = _run_queryset().filter(submission=submission).latest_first()
        return Response(s.RunSerializer(runs, many=True).data)


class RunDetailView(VendorView):
    @extend_schema(
        operation_id="runs_retrieve",
        responses={200: s.RunSerializer, **ERROR_RESPONSES},
        description="Run status with live progress (phase, trial k of n, concurrency, verdicts).",
    )
    def get(self, request: Request, pk: int) -> Response:
        run = get_object_or_404(_run_queryset().filter(submission__org=self.org), pk=pk)
        return Response(s.RunSerializer(run).data)


class RunVerificationView(VendorView):
    @extend_schema(
        operation_id="runs_verification",
        responses={200: s.VerificationSerializer, **ERROR_RESPONSES},
    )
    def get(self, request: Request, pk: int) -> Response:
        run = self.own_run(pk)
        report = VerificationReport.objects.filter(run=run).first()
        if report is None:
            raise ApiError("not_ready", "no verification report yet", status_code=404)
        return Response(s.VerificationSerializer(report).data)


class RunRawRecordsView(VendorView):
    @extend_schema(
        operation_id="runs_raw_records",
        responses={200: s.RawRecordsSerializer, **ERROR_RESPONSES},
        description="Presigned links to this run's raw request records (expire in 15 min).",
    )
    def get(self, request: Request, pk: int) -> Response:
        run = self.own_run(pk)
        storage = artifact_storage()
        files: list[dict] = []
        seen: set[str] = set()
        artifacts = Artifact.objects.filter(run=run, kind=Artifact.KIND_RAW_RECORDS)
        for artifact in artifacts.order_by("storage_key"):
            seen.add(artifact.storage_key)
            files.append(_download(storage, artifact.storage_key, artifact.sha256, artifact.size))
        trials = run.trials.exclude(raw_records_key="").order_by("index")
        for trial in trials:
            if trial.raw_records_key not in seen:
                seen.add(trial.raw_records_key)
                digest = getattr(trial, "raw_records_sha256", "")
                files.append(_download(storage, trial.raw_records_key, digest, None))
        return Response(s.RawRecordsSerializer({"run": run.pk, "files": files}).data)


def _download(storage, key: str, sha256: str, size: int | None) -> dict:
    return {
        "name": key.rsplit("/", 1)[-1],
        "url": storage.url(key, expire=DOWNLOAD_EXPIRES_S),
        "sha256": sha256,
        "size": size,
        "expires_in": DOWNLOAD_EXPIRES_S,
    }


class SubmissionAttachmentsView(VendorView):
    @extend_schema(
        operation_id="attachments_list",
        responses={200: s.AttachmentSerializer(many=True), **ERROR_RESPONSES},
    )
    def get(self, request: Request, pk: int) -> Response:
        submission = self.own_submission(pk)
        qs = Artifact.objects.filter(submission=submission, kind=Artifact.KIND_ATTACHMENT)
        return Response(s.AttachmentSerializer(qs, many=True).data)

    @extend_schema(
        operation_id="attachments_presign",
        request=s.AttachmentInputSerializer,
        responses={201: s.UploadGrantSerializer, 413: OpenApiResponse(), **ERROR_RESPONSES},
        description="Grant one upload of exactly `size` bytes (at most MAX_ATTACHMENT_BYTES): "
        "an S3 presigned POST (send `fields` then the file as multipart form data), or a "
        "signed PUT on the filesystem profile. Then POST .../verify/.",
    )
    def post(self, request: Request, pk: int) -> Response:
        submission = self.own_submission(pk)
        data = s.AttachmentInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            grant = attachment_presign(submission=submission, **data.validated_data)
        except AttachmentError as exc:
            raise attachment_api_error(exc) from None
        return Response(s.UploadGrantSerializer(grant).data, status=status.HTTP_201_CREATED)


class AttachmentVerifyView(VendorView):
    @extend_schema(
        operation_id="attachments_verify",
        request=None,
        responses={200: s.AttachmentSerializer, 409: OpenApiResponse(), **ERROR_RESPONSES},
    )
    def post(self, request: Request, pk: int, attachment_pk: int) -> Response:
        submission = self.own_submission(pk)
        artifact = get_object_or_404(
            Artifact.objects.filter(submission=submission, kind=Artifact.KIND_ATTACHMENT),
            pk=attachment_pk,
        )
        try:
            attachment_verify(artifact=artifact)
        except AttachmentError as exc:
            raise attachment_api_error(exc) from None
        return Response(s.AttachmentSerializer(artifact).data)


class SignedUploadView(APIView):
    """Filesystem profile only: the signed token in the URL is the only authority."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes = [AnonThrottle]
    parser_classes: list = []  # the body is streamed to storage, never parsed

    @extend_schema(
        operation_id="uploads_put",
        request={"application/octet-stream": OpenApiTypes.BINARY},
        responses={204: None, 403: OpenApiResponse(), 409: OpenApiResponse()},
    )
    def put(self, request: Request, token: str) -> Response:
        length = request.META.get("CONTENT_LENGTH")
        try:
            attachment_receive(
                token=token,
                stream=request._request,
                content_length=int(length) if length else None,
            )
        except AttachmentError as exc:
            raise attachment_api_error(exc) from None
        return Response(status=status.HTTP_204_NO_CONTENT)


class DatasetListView(VendorView):
    @extend_schema(
        operation_id="datasets_list",
        responses={200: s.DatasetSerializer(many=True), **ERROR_RESPONSES},
        description="Public datasets (the tuning subset, published by `manage.py "
        "publish_tuning_subset` and `make demo`). The private test set is never listed.",
    )
    def get(self, request: Request) -> Response:
        qs = Dataset.objects.filter(visibility=Dataset.VISIBILITY_PUBLIC)
        return Response(s.DatasetSerializer(qs, many=True).data)


class DatasetDownloadView(VendorView):
    @extend_schema(
        operation_id="datasets_download",
        responses={200: s.DownloadSerializer, **ERROR_RESPONSES},
    )
    def get(self, request: Request, pk: int) -> Response:
        dataset = get_object_or_404(
            Dataset.objects.filter(visibility=Dataset.VISIBILITY_PUBLIC), pk=pk
        )
        storage = storages["datasets"]
        # The file's own sha256 as recorded at creation (what a download checks); `sha256`
        # in the list is the canonical digest (docs/datasets.md "Canonical encoding").
        file_digest = str((dataset.stats or {}).get("file_sha256") or "")
        link = _download(storage, dataset.storage_key, file_digest, dataset.size)
        return Response(s.DownloadSerializer(link).data)


class DeploymentConfigSchemaView(APIView):
    """The deployment-config JSON Schema; public."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes = [AnonThrottle]

    @extend_schema(operation_id="deployment_config_schema", responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        return Response(config_json_schema())
