"""End to end with a real inference engine, through the `container` launcher (the default for
platform pools): the llama.cpp server image (built from local files, pushed to the session's
loopback registry) is pinned by digest in the config; a pool worker with no database pulls
it, checks the digest, runs the config's launch in it with Podman, measures it through the
container's network namespace and removes the container. The run is verified and published
as measured; the result names the image that ran, its inventory has the digest Podman
resolved and what the server says it is, and its receipt (image "pulled by digest and run")
is accepted by `agentperf verify` (docs/security.md "Container launcher", docs/verification.md
"Receipt"). The `process` launcher's sandbox and its "host process, image not run" label are
tested in tests/pipeline/test_sandbox.py, tests/verification/test_inventory_collect.py (a
real llama.cpp server in the sandbox) and tests/containers/test_result_launch.py."""

from __future__ import annotations

import base64
import json
import os
import platform
import subprocess
import time
import urllib.request

import pytest

from leaderboard.energy import power_source
from runner.launchers.container import LABEL_RUN, podman_global_argv
from runner.launchers.tiny_gguf import tiny_gguf
from runs.models import BenchmarkRun
from submissions.models import Artifact, Submission
from tests.pipeline.conftest import EXAMPLES, http, no_database_env, submit, wait_for_status
from tests.pipeline.test_e2e_receipt import signing_key, verify  # noqa: F401 (a fixture)
from tests.support.container_image import pushed_llamacpp_image, registry_url
from tests.support.llamacpp import free_port

pytestmark = [pytest.mark.slow, pytest.mark.llamacpp, pytest.mark.django_db(transaction=True)]


def test_container_launcher_measures_the_pinned_llama_cpp_image_and_removes_it(
    pipeline_settings,
    live_server,
    vendor,
    tmp_path,
    cast,
    signing_key,  # noqa: F811
):
    from core.queues import pool_queue
    from review.services import review_approve_launch, review_publish
    from tests.support.workers import start_worker

    _, token = vendor
    image = pushed_llamacpp_image()
    model = tiny_gguf(seed=0)
    env = no_database_env()
    env["RUNNER_REGISTRIES"] = registry_url()
    env["RUNNER_SANDBOX_RO_PATHS"] = str(model.parent)  # the pool's weights folder
    env["AGENTPERF_TINY_GGUF"] = str(model)
    env["RUNNER_LAUNCH_VARS"] = "AGENTPERF_TINY_GGUF"  # the pool host shares the model file
    env["RUNNER_CONTAINER_MEMORY"] = "2g"
    worker = start_worker([pool_queue("local-cpu")], tmp_path / "container-worker.log", env=env)
    try:
        config = (EXAMPLES / "container.yaml").read_text()
        placeholder = config.split("image: ", 1)[1].split("\n", 1)[0]
        config = config.replace(placeholder, image).replace("port: 18431", f"port: {free_port()}")
        started = time.monotonic()
        created = submit(live_server.url, token, config)
        # A launch on a platform pool waits for a reviewer to approve that launch.
        wait_for_status(live_server.url, token, created["id"], {"awaiting_approval"})
        assert not BenchmarkRun.objects.filter(submission_id=created["id"]).exists()
        review_approve_launch(
            submission=Submission.objects.get(pk=created["id"]),
            actor=cast.rita,
            reason="the repository's llama.cpp image, pinned by digest",
        )
        # a hang guard, not a speed limit: a shared 2-core machine took 8 min (load average 8)
        body = wait_for_status(
            live_server.url, token, created["id"], {"in_review", "failed"}, timeout_s=1800
        )
        print(f"llama.cpp e2e: submission to in_review in {time.monotonic() - started:.1f} s")
        assert body["status"] == "in_review", (body, worker.log()[-3000:])
    finally:
        worker.stop()

    run = BenchmarkRun.objects.get(submission_id=created["id"])
    assert run.queue.endswith("pool.local-cpu")
    endpoint = run.runner_info["endpoint"]
    assert endpoint["launcher"] == "container" and endpoint["sandbox"] == "podman"
    assert endpoint["image"] == image and endpoint["command"] == ["python"]
    assert run.run_spec["launcher"]["image"] == image
    assert {c["name"]: c["status"] for c in run.qualification}["exact_output_length"] == "pass"
    trials = list(run.trials.order_by("index"))
    # A single agent on a slow CPU may send nothing inside one short window; the run as a
    # whole must have measured real answers, every one of the requested length.
    assert sum(t.metrics["ok"] for t in trials) > 0, [t.metrics for t in trials]
    assert all(t.metrics["errors_by_class"].get("wrong_length", 0) == 0 for t in trials)
    log = Artifact.objects.get(run=run, kind=Artifact.KIND_LOG)
    assert log.size > 0  # the server's own log, captured and stored
    # the run's container is gone (stopped and removed at the end of the run)
    listed = subprocess.run(
        [*podman_global_argv(), "ps", "--all", "--format", "json"]
        + ["--filter", f"label={LABEL_RUN}={run.pk}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(listed.stdout or "[]") == []

    checks = {c["name"]: c for c in run.verification.checks}
    assert checks["cache_truth"]["status"] != "fail", (
        checks["cache_truth"],
        [t.metrics.get("cache_truth") for t in trials],
    )
    result = review_publish(
        submission=run.submission, actor=cast.rita, reason="CI", label="llama.cpp image (CI)"
    )
    assert result.is_simulated is False
    # a measured result never shows a modelled power figure (issue 13 item 5)
    assert result.modelled_power is None
    assert all(p["modelled_energy"] is None for p in result.points)
    assert not any("modelled_energy" in t.metrics for t in trials)
    assert power_source(result) != "modelled"
    status, public = http("GET", f"{live_server.url}/api/v1/public/results/{result.pk}/")
    assert status == 200 and public["power_source"] != "modelled"
    assert public["modelled_power"] is None
    assert public["launch"] == {
        "launcher": "container",
        "image_run": True,
        "image": image,
        "note": "image pulled by digest and run (Podman)",
    }
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
    # what served, read for real on this CPU host (docs/verification.md "inventory"): the
    # machine, the runtime as Podman resolved it, and what the llama.cpp server says it is
    inventory = run.telemetry["inventory"]
    assert inventory["machine"]["kernel"] == f"{platform.system()} {platform.release()}"
    assert inventory["machine"]["cpu_count"] == os.cpu_count()
    assert inventory["machine"]["cpu_model"] and inventory["machine"]["memory_total_mib"] > 0
    assert inventory["accelerators"] == [] and inventory["granted"] == []
    runtime = inventory["runtime"]
    assert runtime["launcher"] == "container" and runtime["image_reference"] == image
    assert runtime["image_digest"] == image.split("@", 1)[1] and runtime["user"] == "65534:65534"
    server = inventory["server"]
    assert server["engine_name"] == "llama.cpp" and server["models"] == ["tiny-llamacpp-test"]
    assert "/props build_info=" in server["source"]  # xllamacpp builds report "b0-unknown"
    checked = report["inventory"]
    assert checked["evidence"]["compared"]["accelerators_used"] == {"declared": 1, "inventory": 1}
    assert checked["status"] == "warn" and checked["evidence"]["mismatches"] == [], checked
    assert public["inventory"]["recorded"] is True
    assert public["inventory"]["document"]["machine"] == inventory["machine"]
    assert public["inventory"]["check"]["status"] == "warn"
    with urllib.request.urlopen(f"{live_server.url}/results/{result.pk}/", timeout=30) as page:
        html = page.read().decode()
    assert "modelled" not in html.lower()
    assert 'id="inventory"' in html and "image not run" not in html
    # the receipt says the image ran, and the installed CLI verifies it through the API
    result.refresh_from_db()
    statement = json.loads(base64.b64decode(result.receipt["payload"]))
    assert statement["predicate"]["image"] == {
        "reference": image,
        "digest": image.split("@", 1)[1].removeprefix("sha256:"),
        "status": "pulled by digest and run (container launcher)",
    }
    ok = verify(str(result.pk), "--url", live_server.url, tmp_path=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"receipt of result {result.pk} verifies" in ok.stdout
