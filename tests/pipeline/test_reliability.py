"""A worker killed mid-search: the run is retried and resumes from its stored trials, none
lost or duplicated. Stale heartbeats: the reaper retries, then fails with a reason."""

from __future__ import annotations

import datetime as dt
import re
import signal
import time

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from runs.models import BenchmarkRun, Trial
from runs.services import reap_stale_runs
from submissions import constants as c
from submissions.models import AuditEvent, Submission
from tests.pipeline.builders import prepared_run, runner_info
from tests.pipeline.conftest import submit, wait_for_status
from tests.pipeline.test_e2e_simulated import small_profile_config

LONGER_SEARCH = {"cap": 8, "max_trials": 7}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_search_is_replaced_and_the_search_resumes_without_losing_trials(
    pipeline_settings, live_server, vendor, pool_worker_factory
):
    # The pipeline's short search (ramp 1, 2, 4 and a confirmation): the kill comes after two
    # stored trials, and the resumed attempt still has N = 4 and the confirmation to run.
    _, token = vendor
    first = pool_worker_factory(pools=("simulated",), name="first")
    created = submit(live_server.url, token, small_profile_config())
    run = BenchmarkRun.objects.get(submission_id=created["id"])

    deadline = time.monotonic() + 300
    while Trial.objects.filter(run=run).count() < 2:
        assert time.monotonic() < deadline, first.log()[-3000:]
        time.sleep(0.5)
    first.kill(signal.SIGKILL)  # the whole process group: main process and pool child
    before = {t.index: (t.pk, t.concurrency, t.attempt) for t in Trial.objects.filter(run=run)}
    assert all(attempt == 1 for _, _, attempt in before.values())

    # RabbitMQ redelivers the unacknowledged message to the next worker on the queue.
    second = pool_worker_factory(pools=("simulated",), name="second")
    body = wait_for_status(live_server.url, token, created["id"], {"in_review", "failed"})
    assert body["status"] == "in_review", (body, second.log()[-3000:])

    run.refresh_from_db()
    trials = list(Trial.objects.filter(run=run).order_by("index"))
    assert [t.index for t in trials] == list(range(len(trials)))  # no gap, no duplicate
    for index, (pk, concurrency, attempt) in before.items():
        assert (trials[index].pk, trials[index].concurrency, trials[index].attempt) == (
            pk,
            concurrency,
            attempt,
        )
    assert run.attempt == 2
    assert {t.attempt for t in trials[len(before) :]} == {2}
    assert len(trials) > len(before)
    summary_trials = run.search_summary["trials"]
    assert [(t["index"], t["concurrency"]) for t in summary_trials] == [
        (t.index, t.concurrency) for t in trials
    ]
    resumed = AuditEvent.objects.get(
        object_type="runs.benchmarkrun", object_id=str(run.pk), action="run_resumed"
    )
    assert f"after {len(before)} trials" in resumed.reason


@pytest.mark.django_db
def test_a_run_with_a_stale_heartbeat_is_requeued_with_a_new_token(
    catalog, cast, django_capture_on_commit_callbacks
):
    run, old_token = prepared_run(cast.org_a)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {old_token}")
    assert (
        client.post(
            f"/api/v1/runner/runs/{run.pk}/start", {"runner_info": runner_info()}, format="json"
        ).status_code
        == 200
    )
    BenchmarkRun.objects.filter(pk=run.pk).update(
        heartbeat_at=timezone.now() - dt.timedelta(seconds=3600)
    )
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        actions = reap_stale_runs()
    assert actions == [(run.pk, "retried")]
    assert len(callbacks) == 1  # one new message, sent once the transaction commits
    run.refresh_from_db()
    submission = Submission.objects.get(pk=run.submission_id)
    assert (run.status, submission.status) == ("pending", c.QUEUED)
    assert "no heartbeat for over" in submission.status_reason
    refused = client.get(f"/api/v1/runner/runs/{run.pk}/")
    assert refused.status_code == 401  # the old attempt's token stopped working


@pytest.mark.django_db
def test_a_run_out_of_attempts_is_failed_by_the_reaper_with_the_reason(catalog, cast, settings):
    settings.RUN_MAX_ATTEMPTS = 1
    run, token = prepared_run(cast.org_a)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    client.post(
        f"/api/v1/runner/runs/{run.pk}/start", {"runner_info": runner_info()}, format="json"
    )
    BenchmarkRun.objects.filter(pk=run.pk).update(
        heartbeat_at=timezone.now() - dt.timedelta(seconds=3600)
    )
    assert reap_stale_runs() == [(run.pk, "failed")]
    run.refresh_from_db()
    submission = Submission.objects.get(pk=run.submission_id)
    assert (run.status, submission.status) == ("failed", c.FAILED)
    assert "after 1 attempts" in submission.status_reason


@pytest.mark.django_db
def test_a_fresh_heartbeat_is_left_alone_by_the_reaper(catalog, cast):
    run, token = prepared_run(cast.org_a)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    client.post(
        f"/api/v1/runner/runs/{run.pk}/start", {"runner_info": runner_info()}, format="json"
    )
    assert reap_stale_runs() == []
    run.refresh_from_db()
    assert run.status == "running"


@pytest.mark.django_db
def test_a_run_no_worker_ever_started_is_failed_after_the_pending_limit(catalog, cast, settings):
    settings.RUN_PENDING_STALE_S = 3600
    waiting, _ = prepared_run(cast.org_a)  # queued, not started
    lost, _ = prepared_run(cast.org_b)
    old = timezone.now() - dt.timedelta(seconds=7200)
    BenchmarkRun.objects.filter(pk=lost.pk).update(created_at=old)
    BenchmarkRun.objects.filter(pk=waiting.pk).update(
        created_at=timezone.now() - dt.timedelta(seconds=600)
    )
    assert reap_stale_runs() == [(lost.pk, "failed")]
    lost.refresh_from_db()
    waiting.refresh_from_db()
    assert (lost.status, waiting.status) == ("failed", "pending")
    submission = Submission.objects.get(pk=lost.submission_id)
    assert submission.status == c.FAILED
    assert "no pool worker started this run" in submission.status_reason
    assert reap_stale_runs() == []  # a failed run is not reaped twice


def test_the_beat_schedule_sends_the_reaper_to_the_web_queue() -> None:
    from config.celery import app
    from core.queues import web_queue

    app.loader.import_default_modules()
    entry = app.conf.beat_schedule["reap-stale-runs"]
    assert entry["task"] == "runs.reap_stale_runs"
    assert entry["task"] in app.tasks
    assert entry["options"]["queue"] == web_queue()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_withdrawing_a_running_submission_stops_its_worker_and_the_run_ends_cancelled(
    pipeline_settings, live_server, vendor, pool_worker_factory
):
    from tests.pipeline.conftest import http

    pipeline_settings.RUN_SEARCH_OPTIONS_BY_POOL["simulated-realtime"].update(LONGER_SEARCH)
    pipeline_settings.RUN_HEARTBEAT_INTERVAL_S = 1
    _, token = vendor
    worker = pool_worker_factory(pools=("simulated",), name="cancel")
    created = submit(live_server.url, token, small_profile_config())
    run = BenchmarkRun.objects.get(submission_id=created["id"])
    deadline = time.monotonic() + 300
    while not Trial.objects.filter(run=run).exists():
        assert time.monotonic() < deadline, worker.log()[-3000:]
        time.sleep(0.5)
    status, body = http(
        "POST",
        f"{live_server.url}/api/v1/submissions/{created['id']}/withdraw/",
        token=token,
        body=b'{"reason": "changed our mind"}',
    )
    assert status == 200, body
    while BenchmarkRun.objects.get(pk=run.pk).status == BenchmarkRun.STATUS_RUNNING:
        assert time.monotonic() < deadline, worker.log()[-3000:]
        time.sleep(0.5)
    run.refresh_from_db()
    assert run.status == BenchmarkRun.STATUS_CANCELLED
    assert run.finished_at is not None
    assert "cancelled" in run.error
    trials_at_cancel = Trial.objects.filter(run=run).count()
    # The event: the worker's task for this run has returned (Celery logs the task's end at
    # INFO), so nothing of this run is left that could post a trial; none landed since.
    task_ended = re.compile(r"Task runner\.execute_run\[[^\]]+\] (succeeded|failed|raised)")
    while not task_ended.search(worker.log()):
        assert time.monotonic() < deadline, worker.log()[-3000:]
        time.sleep(0.5)
    assert Trial.objects.filter(run=run).count() == trials_at_cancel


@pytest.mark.django_db
def test_withdrawing_a_queued_submission_cancels_its_pending_run_at_once(catalog, cast):
    from submissions.services.submissions import submission_withdraw

    run, _ = prepared_run(cast.org_a)
    submission = Submission.objects.get(pk=run.submission_id)
    submission_withdraw(submission=submission, actor_label="alice")
    run.refresh_from_db()
    assert (run.status, submission.status) == (BenchmarkRun.STATUS_CANCELLED, c.WITHDRAWN)
    assert run.finished_at is not None


@pytest.mark.django_db
def test_the_reaper_cancels_a_withdrawn_run_whose_worker_went_silent(catalog, cast):
    run, token = prepared_run(cast.org_a)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert (
        client.post(
            f"/api/v1/runner/runs/{run.pk}/start", {"runner_info": runner_info()}, format="json"
        ).status_code
        == 200
    )
    Submission.objects.filter(pk=run.submission_id).update(status=c.WITHDRAWN)
    BenchmarkRun.objects.filter(pk=run.pk).update(
        heartbeat_at=timezone.now() - dt.timedelta(seconds=3600)
    )
    assert reap_stale_runs() == [(run.pk, "cancelled")]
    run.refresh_from_db()
    assert run.status == BenchmarkRun.STATUS_CANCELLED and run.finished_at is not None
    assert reap_stale_runs() == []
