"""The runner API: what a pool worker calls during a run, with that run's token only.

`/api/v1/runner/runs/<id>/` + start | heartbeat | qualification | uploads | blobs | trials |
complete | fail. A run token (`Authorization: Bearer aprun_...`) authenticates as its run
and nothing else: another run's token gets 403, vendor tokens, sessions and anonymous
callers get 401. Writes after `start` carry `X-Run-Attempt`; a superseded attempt gets 409.
A run's token dies with it: once the run is done, failed or cancelled, every call is a 401
`run_finished` (docs/security.md "Run tokens and upload grants").
"""

from __future__ import annotations

import hashlib
import hmac
import tempfile
import time
from typing import TypeVar

from django.conf import settings
from django.core import signing
from django.core.files import File
from django.core.files.storage import storages
from drf_spectacular.utils import extend_schema, inline_serializer
from pydantic import ValidationError
from rest_framework import authentication, exceptions, permissions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentperf import contract
from agentperf.fielderrors import NON_FIELD
from core.api_errors import ApiError
from core.parsers import RunnerJSONParser
from runs import services
from runs.dispatch import RUN_TOKEN_PREFIX, dataset_section, run_token_hash, storage_get_url
from runs.models import BenchmarkRun
from submissions.models import Artifact

_BLOB_SALT = "agentperf.runner.blob"
# On a refusal because the run is final (401 run_finished, 409): done, failed or cancelled.
RUN_STATUS_HEADER = "X-Run-Status"


class RunPrincipal:
    """The caller of a run-token request: one run, nothing else."""

    is_authenticated = True
    is_anonymous = False
    is_staff = False
    is_superuser = False
    pk = None

    def __init__(self, run: BenchmarkRun) -> None:
        self.run = run

    def get_username(self) -> str:
        return f"runner:run-{self.run.pk}"

    def __str__(self) -> str:
        return self.get_username()


class RunFinished(exceptions.AuthenticationFailed):
    default_detail = "this run is finished; its token no longer works"
    default_code = "run_finished"

    def __init__(self, run: BenchmarkRun) -> None:
        super().__init__(f"run #{run.pk} is {run.status}; its token no longer works")
        self.run_status = run.status


class RunTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"
    # a finished run in these states still authenticates (CompleteView: a repeated completion)
    finished_allowed: frozenset[str] = frozenset()

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        keyword, _, value = header.partition(" ")
        value = value.strip()
        if keyword != self.keyword or not value.startswith(RUN_TOKEN_PREFIX):
            return None
        digest = run_token_hash(value)
        run = BenchmarkRun.objects.filter(token_hash=digest).first()
        if run is None or not hmac.compare_digest(run.token_hash, digest):
            raise exceptions.AuthenticationFailed("invalid or rotated run token")
        if run.status in BenchmarkRun.FINAL_STATES and run.status not in self.finished_allowed:
            raise RunFinished(run)
        return RunPrincipal(run), value

    def authenticate_header(self, request) -> str:
        return self.keyword


class IsThisRunsToken(permissions.BasePermission):
    message = "this token belongs to another run"

    def has_permission(self, request, view) -> bool:
        principal = request.user
        if not isinstance(principal, RunPrincipal):
            return False
        return principal.run.pk == int(view.kwargs["run_id"])


class RunView(APIView):
    parser_classes = [RunnerJSONParser]
    authentication_classes = [RunTokenAuthentication]
    permission_classes = [IsThisRunsToken]
    throttle_classes: list = []

    def permission_denied(self, request, message=None, code=None):
        if not isinstance(request.user, RunPrincipal):
            raise exceptions.NotAuthenticated("a run token is required")
        super().permission_denied(request, message=message, code=code)

    def run(self, request: Request) -> BenchmarkRun:
        return BenchmarkRun.objects.select_related("submission").get(pk=request.user.run.pk)

    @staticmethod
    def attempt(request: Request) -> int | None:
        raw = request.headers.get("X-Run-Attempt")
        if raw is None:
            return None
        try:
            return int(raw)
        except ValueError:
            raise ApiError("invalid", "X-Run-Attempt must be an integer") from None

    def handle_exception(self, exc):
        # how the run ended, when the refusal is because it ended: the worker records the
        # same final state as the site (docs/pipeline.md "Contention")
        run_status = getattr(exc, "run_status", None)
        if isinstance(exc, services.RunConflict):
            exc = ApiError("conflict", str(exc), status_code=status.HTTP_409_CONFLICT)
        elif isinstance(exc, services.RunInvalid):
            exc = ApiError("invalid", str(exc), status_code=status.HTTP_400_BAD_REQUEST)
        response = super().handle_exception(exc)
        if run_status:
            response[RUN_STATUS_HEADER] = run_status
        return response


Document = TypeVar("Document", bound=contract.Contract)


def _document(request: Request, model: type[Document], what: str) -> Document:
    """The body as a contract document (agentperf/contract.py); anything that does not fit —
    an unknown or misspelled field, a missing one, a wrong type — is a 400 naming each
    field by its path (docs/pipeline.md "The contract")."""
    try:
        return model.model_validate(request.data)
    except ValidationError as exc:
        raise ApiError(
            "invalid",
            f'the {what} does not fit the contract (docs/pipeline.md "The contract")',
            fields=contract.error_fields(exc),
        ) from None


_OK = inline_serializer("RunnerOk", {"ok": serializers.BooleanField()})


class RunRootView(RunView):
    @extend_schema(
        responses=inline_serializer(
            "RunnerRun",
            {
                "id": serializers.IntegerField(),
                "status": serializers.CharField(),
                "attempt": serializers.IntegerField(),
            },
        )
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = self.run(request)
        return Response({"id": run.pk, "status": run.status, "attempt": run.attempt})


class StartView(RunView):
    @extend_schema(
        request=contract.StartReport,
        responses=inline_serializer(
            "RunnerStart",
            {
                "attempt": serializers.IntegerField(),
                "trials": serializers.JSONField(),
                "dataset": serializers.JSONField(),
            },
        ),
    )
    def post(self, request: Request, run_id: int) -> Response:
        report = _document(request, contract.StartReport, "start report")
        run = services.run_start(run=self.run(request), runner_info=report.runner_info)
        trials = [services.search_trial_dict(t) for t in run.trials.order_by("index")]
        return Response({"attempt": run.attempt, "trials": trials, "dataset": dataset_section(run)})


class HeartbeatView(RunView):
    @extend_schema(
        request=contract.Heartbeat,
        responses=inline_serializer("RunnerHeartbeat", {"cancel": serializers.BooleanField()}),
    )
    def post(self, request: Request, run_id: int) -> Response:
        beat = _document(request, contract.Heartbeat, "heartbeat")
        cancel = services.run_heartbeat(
            run=self.run(request), attempt=self.attempt(request), progress=beat.progress
        )
        return Response({"cancel": cancel})


class QualificationView(RunView):
    @extend_schema(request=contract.QualificationReport, responses=_OK)
    def post(self, request: Request, run_id: int) -> Response:
        report = _document(request, contract.QualificationReport, "qualification report")
        services.run_record_qualification(
            run=self.run(request), attempt=self.attempt(request), report=report
        )
        return Response({"ok": True})


def _upload_target(request: Request, run: BenchmarkRun, key: str, size: int, sha256: str) -> dict:
    """An upload grant (`contract.UploadGrant`) for one PUT of exactly `size` bytes within
    RUN_UPLOAD_GRANT_SECONDS: a presigned S3 PUT that signs the Content-Length, or
    (filesystem storage) a signed PUT to this API that carries the size, the SHA-256, the
    expiry and the attempt (docs/security.md "Run tokens and upload grants")."""
    storage = storages["artifacts"]
    lifetime = settings.RUN_UPLOAD_GRANT_SECONDS
    expires_at = int(time.time()) + lifetime
    headers = {"Content-Type": "application/gzip", "Content-Length": str(size)}
    if hasattr(storage, "bucket_name"):
        client = storage.connection.meta.client
        url = client.generate_presigned_url(
            "put_object",
            Params={
                "Bucket": storage.bucket_name,
                "Key": storage._normalize_name(key),
                "ContentType": "application/gzip",
                "ContentLength": size,
            },
            ExpiresIn=lifetime,
        )
    else:
        grant = {
            "k": key,
            "r": run.pk,
            "a": run.attempt,
            "s": size,
            "h": sha256,
            "e": expires_at,
        }
        token = signing.Signer(salt=_BLOB_SALT).sign_object(grant)
        base = settings.RUNNER_API_BASE_URL.rstrip("/")
        url = f"{base}/api/v1/runner/runs/{run.pk}/blobs?t={token}"
        headers["Authorization"] = request.headers.get("Authorization", "")
    document = contract.UploadGrant(
        url=url, method="PUT", headers=headers, size=size, expires_at=expires_at
    )
    return document.dump()


class UploadsView(RunView):
    @extend_schema(
        request=contract.UploadRequest,
        responses=inline_serializer(
            "RunnerUpload", {"key": serializers.CharField(), "upload": serializers.JSONField()}
        ),
    )
    def post(self, request: Request, run_id: int) -> Response:
        upload = _document(request, contract.UploadRequest, "upload request")
        run = self.run(request)
        attempt = self.attempt(request)
        if run.status != BenchmarkRun.STATUS_RUNNING or attempt != run.attempt:
            raise services.RunConflict(f"attempt {attempt} of run #{run.pk} may not upload")
        if upload.size > settings.RUN_UPLOAD_MAX_BYTES:
            raise ApiError(
                "too_large",
                f"uploads are limited to {settings.RUN_UPLOAD_MAX_BYTES} bytes",
                fields={"size": [f"larger than {settings.RUN_UPLOAD_MAX_BYTES} bytes"]},
                status_code=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            )
        key = services.upload_key(
            run,
            kind=upload.kind,
            trial_index=upload.trial_index,
            trial_id=upload.trial_id,
            shard=upload.shard,
        )
        target = _upload_target(request, run, key, upload.size, upload.sha256)
        return Response({"key": key, "upload": target})


class BlobView(RunView):
    """The upload target when artifacts live on the filesystem (embedded profile)."""

    @extend_schema(request=None, responses=_OK)
    def put(self, request: Request, run_id: int) -> Response:
        run = self.run(request)
        try:
            grant = signing.Signer(salt=_BLOB_SALT).unsign_object(request.query_params.get("t", ""))
        except signing.BadSignature:
            raise ApiError("invalid", "invalid upload grant", status_code=403) from None
        if grant.get("r") != run.pk:
            raise ApiError("forbidden", "the grant is for another run", status_code=403)
        if int(grant.get("e", 0)) < time.time():
            raise ApiError("expired", "the upload grant has expired", status_code=403)
        if run.status != BenchmarkRun.STATUS_RUNNING or grant.get("a") != run.attempt:
            raise services.RunConflict(f"the grant's attempt of run #{run.pk} is over")
        declared = int(grant.get("s", 0))
        length = request.headers.get("Content-Length")
        if length is not None and (not length.isdigit() or int(length) != declared):
            raise ApiError(
                "size_mismatch",
                f"Content-Length {length} is not the grant's declared size {declared}",
                fields={"Content-Length": [f"must be {declared}"]},
                status_code=413 if length.isdigit() and int(length) > declared else 400,
            )
        key = str(grant["k"])
        storage = storages["artifacts"]
        with tempfile.TemporaryFile() as spool:
            # Read at most one byte past the declared size: a longer body is refused
            # without spooling it.
            left = declared + 1
            while left > 0:
                chunk = request._request.read(min(left, 1024 * 1024))
                if not chunk:
                    break
                spool.write(chunk)
                left -= len(chunk)
            if spool.tell() != declared:
                raise ApiError(
                    "size_mismatch",
                    f"the body is not the grant's declared size {declared}",
                    fields={NON_FIELD: [f"must be {declared} bytes"]},
                    status_code=413 if spool.tell() > declared else 400,
                )
            # the bytes the grant was asked for, and no others: a second PUT on the same
            # grant with other bytes of the same size is refused, the stored file kept
            spool.seek(0)
            digest = hashlib.file_digest(spool, "sha256").hexdigest()  # type: ignore[arg-type]
            if digest != grant.get("h"):
                raise ApiError(
                    "sha256_mismatch",
                    f"the body's SHA-256 {digest[:16]}… is not the one the grant was given for",
                    fields={NON_FIELD: ["its SHA-256 differs from the upload request's sha256"]},
                    status_code=400,
                )
            spool.seek(0)
            if storage.exists(key):
                storage.delete(key)
            storage.save(key, File(spool))
        return Response({"ok": True})


class TrialsView(RunView):
    @extend_schema(responses=inline_serializer("RunnerTrials", {"trials": serializers.JSONField()}))
    def get(self, request: Request, run_id: int) -> Response:
        run = self.run(request)
        trials = [services.search_trial_dict(t) for t in run.trials.order_by("index")]
        return Response({"trials": trials})

    @extend_schema(
        request=contract.TrialReport,
        responses=inline_serializer(
            "RunnerTrialStored",
            {"index": serializers.IntegerField(), "created": serializers.BooleanField()},
        ),
    )
    def post(self, request: Request, run_id: int) -> Response:
        report = _document(request, contract.TrialReport, "trial report")
        trial, created = services.run_record_trial(
            run=self.run(request), attempt=self.attempt(request), report=report
        )
        return Response(
            {"index": trial.index, "created": created},
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class ShardsView(RunView):
    """Load-generator shards of a sharded trial (docs/engine.md "Sharded trials"): a shard
    host reports here after uploading its records; the coordinator lists the reports of a
    trial with a GET URL for each shard's records."""

    @extend_schema(request=contract.ShardReport, responses=_OK)
    def post(self, request: Request, run_id: int) -> Response:
        report = _document(request, contract.ShardReport, "shard report")
        services.run_store_shard_report(
            run=self.run(request), attempt=self.attempt(request), report=report
        )
        return Response({"ok": True}, status=status.HTTP_201_CREATED)

    @extend_schema(responses=inline_serializer("RunnerShards", {"shards": serializers.JSONField()}))
    def get(self, request: Request, run_id: int) -> Response:
        trial_id = request.query_params.get("trial_id", "")
        if not services.SHARD_TRIAL_ID.match(trial_id):
            raise ApiError("invalid", "trial_id must look like t<index>a<attempt>")
        try:
            shards = int(request.query_params.get("shards", ""))
        except ValueError:
            raise ApiError("invalid", "shards must be an integer") from None
        run = self.run(request)
        reports = services.run_shard_reports(run=run, trial_id=trial_id, shards=shards)
        for doc in reports:
            doc["url"] = storage_get_url(doc["key"], "artifacts")
        return Response({"shards": reports})


class CompletionTokenAuthentication(RunTokenAuthentication):
    finished_allowed = frozenset({BenchmarkRun.STATUS_DONE})


class CompleteView(RunView):
    """A completion sent again by the attempt that finished the run, with the same
    documents, is answered 200 as the first was (its answer was lost: a 503, a dropped
    connection, a worker killed mid-call); anything else for a finished run is 401
    `run_finished` as on every other endpoint (docs/pipeline.md "Contention")."""

    authentication_classes = [CompletionTokenAuthentication]

    @extend_schema(
        request=contract.CompletionReport,
        responses=inline_serializer("RunnerComplete", {"status": serializers.CharField()}),
    )
    def post(self, request: Request, run_id: int) -> Response:
        report = _document(request, contract.CompletionReport, "completion report")
        run = self.run(request)
        attempt = self.attempt(request)
        if run.status in BenchmarkRun.FINAL_STATES and not services.completion_repeats(
            run, attempt, report
        ):
            raise RunFinished(run)
        run = services.run_complete(run=run, attempt=attempt, report=report)
        return Response({"status": run.submission.status})


class FailView(RunView):
    @extend_schema(
        request=contract.FailureReport,
        responses=inline_serializer("RunnerFail", {"status": serializers.CharField()}),
    )
    def post(self, request: Request, run_id: int) -> Response:
        report = _document(request, contract.FailureReport, "failure report")
        run = self.run(request)
        for log in report.logs:
            try:
                services._artifact_for(run, kind=Artifact.KIND_LOG, ref=log)
            except services.RunInvalid:
                pass  # a log that did not arrive must not hide the failure itself
        run = services.run_fail(run=run, attempt=self.attempt(request), reason=report.reason)
        return Response({"status": run.status})
