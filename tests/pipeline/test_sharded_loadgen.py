"""A sharded search across load-generator "hosts" through RabbitMQ (docs/engine.md
"Sharded trials"): a pool worker coordinates, two more Celery worker processes — each with
its own host name and folders, no database, no S3 credentials — consume `loadgen.simulated`
and run the shards against the real-time simulator; the run is verified and published."""

from __future__ import annotations

import gzip
import json
import time

import pytest
from django.core.files.storage import storages

from core.queues import loadgen_queue
from review.services import review_publish
from runs.models import BenchmarkRun, VerificationReport
from submissions.models import Submission
from tests.pipeline.conftest import FAST_SEARCH, no_database_env, submit, wait_for_status
from tests.pipeline.test_e2e_simulated import small_profile_config
from tests.support.workers import start_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_search_sharded_over_two_load_generator_hosts_is_published(
    pipeline_settings, live_server, vendor, pool_worker_factory, cast, tmp_path, client
):
    # Two trials: N = 1 (one agent, in the pool worker) and N = 2 sharded over both hosts; no
    # confirmation of N = 2 (the search ends at its budget), since every sharded trial is
    # checked alike below and one is enough to show both hosts' shards merged.
    pipeline_settings.RUN_SEARCH_OPTIONS_BY_POOL = {
        **pipeline_settings.RUN_SEARCH_OPTIONS_BY_POOL,
        "simulated-realtime": dict(
            FAST_SEARCH, cap=2, max_trials=2, shards=2, loadgen_hosts=["lg-a", "lg-b"]
        ),
    }
    _, token = vendor
    pool_worker_factory(pools=("simulated",))
    hosts = []
    for name in ("lg-a", "lg-b"):
        env = no_database_env()
        env["AGENTPERF_LOADGEN_HOST"] = name
        env["AGENTPERF_RUNNER_CACHE"] = str(tmp_path / name / "cache")
        env["TMPDIR"] = str((tmp_path / name / "tmp").resolve())
        (tmp_path / name / "tmp").mkdir(parents=True)
        hosts.append(start_worker([loadgen_queue("simulated")], tmp_path / f"{name}.log", env=env))
    try:
        started = time.monotonic()
        created = submit(live_server.url, token, small_profile_config())
        body = wait_for_status(live_server.url, token, created["id"], {"in_review", "failed"})
        print(f"sharded e2e: submission to in_review in {time.monotonic() - started:.1f} s")
        assert body["status"] == "in_review", (body, [h.log()[-2000:] for h in hosts])
    finally:
        for host in hosts:
            host.stop()

    submission = Submission.objects.get(pk=created["id"])
    run = BenchmarkRun.objects.get(submission=submission)
    assert run.run_spec["loadgen"] == {
        "shards": 2,
        "hosts": ["lg-a", "lg-b"],
        "queue": loadgen_queue("simulated"),
    }
    trials = list(run.trials.order_by("index"))
    assert [t.index for t in trials] == list(range(len(trials)))
    sharded = [t for t in trials if t.concurrency >= 2]
    assert sharded, [t.concurrency for t in trials]
    storage = storages["artifacts"]
    for trial in sharded:
        lg = trial.metrics["load_generator"]
        assert lg["shards"] == 2 and lg["healthy"], lg
        assert {p["host"] for p in lg["per_shard"]} == {"lg-a", "lg-b"}
        assert all(p["clock_uncertainty_ns"] <= 1_000_000 for p in lg["per_shard"])
        # the trial's raw records are the merge of both shards' records
        with storage.open(trial.raw_records_key, "rb") as fh:
            records = [json.loads(line) for line in gzip.decompress(fh.read()).splitlines()]
        assert len(records) == trial.raw_records_count == sum(p["records"] for p in lg["per_shard"])
        assert {r["agent_id"] % 2 for r in records} == {0, 1}
    for host in hosts:  # each host ran shards (the broker spread them) in its own folders
        assert "runner.loadgen_shard" in host.log() and "succeeded" in host.log()

    report = VerificationReport.objects.get(run=run)
    checks = {c["name"]: c for c in report.checks}
    assert checks["load_generator"]["status"] == "pass", checks["load_generator"]
    assert checks["load_generator"]["evidence"]["sharded_trials"] == len(sharded)
    # The reviewer sees each shard's agents, host, health and clock offset on the run page,
    client.force_login(cast.rita)
    page = client.get(f"/review/runs/{run.pk}/").content.decode()
    assert 'id="load-generator"' in page and "lg-a" in page and "lg-b" in page
    result = review_publish(submission=submission, actor=cast.rita, reason="CI")
    assert result.is_simulated and len(result.points) == len(trials)
    # and so does every reader on the result page
    page = client.get(f"/results/{result.pk}/").content.decode()
    assert "t-load_generator" in page and "lg-a" in page and "lg-b" in page
    assert "First-token stamping delay p99 (ms)" in page
