"""Run tokens die with their run, upload grants carry an expiry and a size, and a
withdrawal is final whenever it lands (docs/security.md "Run tokens and upload grants",
"Every run ends")."""

from __future__ import annotations

import hashlib
import threading
import urllib.error
import urllib.request

import pytest
from django.db import connection, connections
from django.test import override_settings
from rest_framework.test import APIClient

from runs.models import BenchmarkRun
from runs.services import RunConflict, run_cancel, run_start
from submissions import constants as c
from submissions.models import Submission
from submissions.services.submissions import submission_withdraw
from tests.pipeline.builders import prepared_run, runner_info
from tests.pipeline.test_runner_api import _started


@pytest.mark.django_db
def test_a_finished_runs_token_no_longer_reads_or_writes_its_run(catalog, cast):
    run, token = prepared_run(cast.org_a)
    client = _started(run, token)
    assert client.get(f"/api/v1/runner/runs/{run.pk}/").status_code == 200
    assert run_cancel(run=run, reason="test")
    for method, path in (("get", ""), ("post", "heartbeat"), ("get", "trials")):
        response = getattr(client, method)(f"/api/v1/runner/runs/{run.pk}/{path}", {}, "json")
        assert response.status_code == 401, (method, path)
        assert response.json()["error"]["code"] == "run_finished"


def _grant(client: APIClient, run: BenchmarkRun, body: bytes) -> dict:
    """A grant for ``body``: its size and sha256, as the worker declares them."""
    response = client.post(
        f"/api/v1/runner/runs/{run.pk}/uploads",
        {
            "kind": "raw_records",
            "sha256": hashlib.sha256(body).hexdigest(),
            "size": len(body),
            "trial_index": 0,
        },
        format="json",
    )
    assert response.status_code == 200, response.content
    return response.json()


@pytest.fixture
def blob_storage(settings, tmp_path):
    """The embedded profile's artifact storage: the grant is a signed PUT to the API."""
    artifacts = {
        "BACKEND": "core.storage.SignedFileSystemStorage",
        "OPTIONS": {"location": str(tmp_path), "base_url": "/files/artifacts/"},
    }
    settings.STORAGES = {**settings.STORAGES, "artifacts": artifacts}
    return tmp_path


def _put(client: APIClient, url: str, body: bytes):
    path = url.removeprefix("http://testserver")
    return client.generic("PUT", path, body, content_type="application/gzip")


@pytest.mark.django_db
@override_settings(RUNNER_API_BASE_URL="http://testserver")
def test_a_blob_put_beyond_the_declared_size_is_refused(catalog, cast, blob_storage):
    run, token = prepared_run(cast.org_a)
    client = _started(run, token)
    grant = _grant(client, run, b"x" * 10)
    assert grant["upload"]["size"] == 10 and grant["upload"]["expires_at"] > 0
    response = _put(client, grant["upload"]["url"], b"x" * (3 * 1024 * 1024))
    assert response.status_code == 413, response.content
    assert response.json()["error"]["code"] == "size_mismatch"
    assert not (blob_storage / grant["key"]).exists()
    assert _put(client, grant["upload"]["url"], b"x" * 10).status_code == 200
    assert (blob_storage / grant["key"]).read_bytes() == b"x" * 10


@pytest.mark.django_db
@override_settings(RUNNER_API_BASE_URL="http://testserver", RUN_UPLOAD_GRANT_SECONDS=-1)
def test_an_expired_blob_grant_is_refused(catalog, cast, blob_storage):
    run, token = prepared_run(cast.org_a)
    client = _started(run, token)
    grant = _grant(client, run, b"x" * 10)
    response = _put(client, grant["upload"]["url"], b"x" * 10)
    assert response.status_code == 403 and response.json()["error"]["code"] == "expired"
    assert not (blob_storage / grant["key"]).exists()


@pytest.mark.django_db
@override_settings(RUNNER_API_BASE_URL="http://testserver")
def test_a_blob_grant_of_a_cancelled_run_is_refused(catalog, cast, blob_storage):
    run, token = prepared_run(cast.org_a)
    client = _started(run, token)
    grant = _grant(client, run, b"x" * 10)
    assert run_cancel(run=run, reason="test")
    response = _put(client, grant["upload"]["url"], b"x" * 10)
    assert response.status_code == 401 and response.json()["error"]["code"] == "run_finished"
    assert not (blob_storage / grant["key"]).exists()


@pytest.mark.django_db
def test_a_presigned_s3_put_beyond_the_declared_size_is_refused(catalog, cast):
    from django.core.files.storage import storages

    if not hasattr(storages["artifacts"], "bucket_name"):
        pytest.fail("the services profile's artifacts are on S3 (tests/services.py)")
    run, token = prepared_run(cast.org_a)
    client = _started(run, token)
    grant = _grant(client, run, b"x" * 10)["upload"]

    def put(body: bytes) -> int:
        headers = {**grant["headers"], "Content-Length": str(len(body))}
        request = urllib.request.Request(grant["url"], data=body, method="PUT", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    assert 400 <= put(b"x" * (3 * 1024 * 1024)) < 500
    assert put(b"x" * 10) == 200


# --- withdraw is final ----------------------------------------------------------------


@pytest.mark.django_db
def test_a_withdrawal_read_before_the_start_and_written_after_it_cancels_the_run(catalog, cast):
    """The race of the finding, in a fixed order: the withdrawal read the submission while
    it was queued, the worker's start moved it to running, then the withdrawal writes."""
    run, _ = prepared_run(cast.org_a)
    read_by_the_withdrawal = Submission.objects.get(pk=run.submission_id)
    assert read_by_the_withdrawal.status == c.QUEUED
    run_start(run=run, runner_info=_info())
    assert Submission.objects.get(pk=run.submission_id).status == c.RUNNING
    submission_withdraw(submission=read_by_the_withdrawal, actor_label="alice")
    run.refresh_from_db()
    assert read_by_the_withdrawal.status == c.WITHDRAWN
    assert run.status == BenchmarkRun.STATUS_CANCELLED and run.finished_at is not None


@pytest.mark.django_db
def test_a_start_after_the_withdrawal_is_refused_and_the_run_stays_cancelled(catalog, cast):
    run, _ = prepared_run(cast.org_a)
    submission_withdraw(submission=Submission.objects.get(pk=run.submission_id), actor_label="a")
    with pytest.raises(RunConflict):
        run_start(run=run, runner_info=_info())
    run.refresh_from_db()
    assert run.status == BenchmarkRun.STATUS_CANCELLED


def _info():
    from agentperf.contract import RunnerInfo

    return RunnerInfo.model_validate(runner_info())


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("start_first", [True, False])
def test_a_withdrawal_racing_the_start_on_two_connections_ends_the_run_cancelled(
    catalog, cast, start_first
):
    """Either order, on two database connections: the start holds its locks while the
    withdrawal arrives and waits (seen in pg_stat_activity, not by sleeping), then the start
    commits; and the other way round. Either way the run ends cancelled."""
    run, _ = prepared_run(cast.org_a)
    stale = Submission.objects.get(pk=run.submission_id)
    holding = threading.Event()
    release = threading.Event()
    pid: list[int] = []
    errors: list[BaseException] = []

    def first() -> None:
        from django.db import transaction

        try:
            with transaction.atomic():
                pid.append(connections["default"].connection.info.backend_pid)
                if start_first:
                    run_start(run=run, runner_info=_info())
                    # hold the run's and the submission's locks until told
                    BenchmarkRun.objects.select_for_update().select_related("submission").get(
                        pk=run.pk
                    )
                else:
                    submission_withdraw(
                        submission=Submission.objects.get(pk=run.submission_id),
                        actor_label="alice",
                    )
                holding.set()
                release.wait(60)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
            holding.set()
        finally:
            connections["default"].close()

    thread = threading.Thread(target=first)
    thread.start()
    assert holding.wait(60) and not errors, errors
    second_errors: list[BaseException] = []

    def second() -> None:
        try:
            if start_first:
                submission_withdraw(submission=stale, actor_label="alice")
            else:
                run_start(run=run, runner_info=_info())
        except BaseException as exc:
            second_errors.append(exc)
        finally:
            connections["default"].close()

    other = threading.Thread(target=second)
    other.start()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (mine,) = cursor.fetchone()
    # the second call is blocked on the first's row locks (another backend than ours)
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND pid <> %s AND pid <> %s AND datname = current_database()",
                [mine, pid[0]],
            )
            (waiting,) = cursor.fetchone()
        if waiting or not other.is_alive():
            break
    release.set()
    thread.join(60)
    other.join(60)
    assert not errors, errors
    run.refresh_from_db()
    submission = Submission.objects.get(pk=run.submission_id)
    assert submission.status == c.WITHDRAWN, start_first
    assert run.status == BenchmarkRun.STATUS_CANCELLED, (start_first, second_errors)
    if start_first:
        assert not second_errors, second_errors
    else:  # the start comes second and is refused as the withdrawn run's
        assert [type(e) for e in second_errors] == [RunConflict]


@pytest.mark.django_db
def test_a_resubmission_cancels_the_runs_of_the_submission_it_replaces(catalog, cast):
    from submissions.services.submissions import submission_resubmit
    from tests.pipeline.builders import EXAMPLES

    run, _ = prepared_run(cast.org_a)
    previous = Submission.objects.get(pk=run.submission_id)
    text = (EXAMPLES / "simulated.yaml").read_text()
    submission_resubmit(previous=previous, config_text=text, actor_label="alice")
    run.refresh_from_db()
    assert previous.status == c.WITHDRAWN
    assert run.status == BenchmarkRun.STATUS_CANCELLED and run.finished_at is not None
