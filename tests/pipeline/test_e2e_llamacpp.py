"""End to end with a real inference engine: the `process` launcher starts a llama.cpp
server (PyPI xllamacpp, the tiny GGUF) on a pool worker with no database, measures it and
stops it; the run is verified and published as measured."""

from __future__ import annotations

import os
import sys
import time
import urllib.request

import pytest

from leaderboard.energy import power_source
from runner.launchers.tiny_gguf import tiny_gguf
from runs.models import BenchmarkRun
from submissions.models import Artifact, Submission
from tests.pipeline.conftest import EXAMPLES, http, no_database_env, submit, wait_for_status
from tests.support.llamacpp import free_port

pytestmark = [pytest.mark.slow, pytest.mark.llamacpp, pytest.mark.django_db(transaction=True)]


def test_process_launcher_measures_a_real_llama_cpp_server_and_stops_it(
    pipeline_settings, live_server, vendor, tmp_path, cast
):
    from core.queues import pool_queue
    from review.services import review_approve_launch, review_publish
    from tests.support.workers import start_worker

    _, token = vendor
    port = free_port()
    env = no_database_env()
    env["AGENTPERF_TINY_GGUF"] = str(tiny_gguf(seed=0))
    env["RUNNER_LAUNCH_VARS"] = "AGENTPERF_TINY_GGUF"  # the pool host shares the model file
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    worker = start_worker([pool_queue("local-cpu")], tmp_path / "cpu-worker.log", env=env)
    try:
        config = (EXAMPLES / "process.yaml").read_text().replace("port: 18431", f"port: {port}")
        started = time.monotonic()
        created = submit(live_server.url, token, config)
        # A process launch on a platform pool waits for a reviewer to approve that launch.
        body = wait_for_status(live_server.url, token, created["id"], {"awaiting_approval"})
        assert not BenchmarkRun.objects.filter(submission_id=created["id"]).exists()
        review_approve_launch(
            submission=Submission.objects.get(pk=created["id"]),
            actor=cast.rita,
            reason="llama.cpp wrapper from the repository, tiny test model",
        )
        body = wait_for_status(live_server.url, token, created["id"], {"in_review", "failed"})
        print(f"llama.cpp e2e: submission to in_review in {time.monotonic() - started:.1f} s")
        assert body["status"] == "in_review", (body, worker.log()[-3000:])
    finally:
        worker.stop()

    submission = Submission.objects.get(pk=created["id"])
    run = BenchmarkRun.objects.get(submission=submission)
    assert run.queue.endswith("pool.local-cpu")
    assert run.runner_info["endpoint"]["launcher"] == "process"
    assert run.runner_info["endpoint"]["sandbox"] == "bubblewrap"
    assert {c["name"]: c["status"] for c in run.qualification}["exact_output_length"] == "pass"
    trials = list(run.trials.order_by("index"))
    # A single agent on a slow CPU may send nothing inside one short window; the run as a
    # whole must have measured real answers, every one of the requested length.
    assert sum(t.metrics["ok"] for t in trials) > 0, [t.metrics for t in trials]
    assert all(t.metrics["errors_by_class"].get("wrong_length", 0) == 0 for t in trials)
    log = Artifact.objects.get(run=run, kind=Artifact.KIND_LOG)
    assert log.size > 0  # the server's own log, captured and stored
    with pytest.raises(OSError):  # the server was stopped after the run
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)

    result = review_publish(
        submission=run.submission, actor=cast.rita, reason="CI", label="llama.cpp on this CPU (CI)"
    )
    assert result.is_simulated is False
    # a measured result never shows a modelled power figure (issue 13 item 5)
    assert result.modelled_power is None
    assert all(p["modelled_energy"] is None for p in result.points)
    assert not any("modelled_energy" in t.metrics for t in trials)
    assert power_source(result) != "modelled"
    status, body = http("GET", f"{live_server.url}/api/v1/public/results/{result.pk}/")
    assert status == 200 and body["power_source"] != "modelled" and body["modelled_power"] is None
    with urllib.request.urlopen(f"{live_server.url}/results/{result.pk}/", timeout=30) as page:
        assert "modelled" not in page.read().decode().lower()
    # the quality floor: the shipped F32 reference of the demo model, same build here
    report = {c["name"]: c for c in run.verification.checks}
    assert report["quality_distribution"]["status"] == "pass", report["quality_distribution"]
    assert report["model_identity"]["status"] == "pass", report["model_identity"]
    assert result.quality["status"] == "pass" and result.quality["top1_agreement"] >= 0.97
    # the task check ran idle and under load, every completion executed in the sandbox;
    # the tiny random model scores 0 like its reference, so it decides nothing (warn)
    task = report["quality_task"]
    assert task["status"] == "warn" and "cannot do the task" in task["summary"], task
    idle, loaded = task["evidence"]["phases"]["idle"], task["evidence"]["phases"]["under_load"]
    assert len(idle["outcomes"]) == len(loaded["outcomes"]) == 6
    assert loaded["concurrency"] >= 1
    assert all(o["detail"] for o in idle["outcomes"])  # each one was executed and judged
    assert result.hardware.slug == "local-cpu"
    assert result.engine_name == "llamacpp"
