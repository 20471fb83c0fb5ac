"""End to end through the real parts: vendor API → dispatch → RabbitMQ → a pool worker
process with no database → real-time simulator → runner API (live server) → SeaweedFS →
verification → review in the admin → a published Result."""

from __future__ import annotations

import gzip
import re
import time

import pytest
from django.core.files.storage import storages

from review.services import review_publish
from runs.models import BenchmarkRun, VerificationReport
from submissions.models import AuditEvent, Submission
from tests.pipeline.conftest import EXAMPLES, http, submit, wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def small_profile_config() -> str:
    """The simulated example on the tiny profile, claiming what that profile is: one
    accelerator and no speculative decoding (so the real-time server, and an honest claim)."""
    text = (EXAMPLES / "simulated.yaml").read_text()
    text = re.sub(r"profile: [a-z0-9.-]+", "profile: tiny", text)
    for key in ("accelerators_per_worker", "dp", "ep", "accelerators_used"):
        text = re.sub(rf"(\b{key}:) 8\b", r"\1 1", text)
    text = re.sub(r"speculative:\n(  .*\n)+", "", text)
    assert "accelerators_used: 1" in text and "speculative" not in text
    return text


def _transitions(submission_id: int) -> list[str]:
    events = AuditEvent.objects.filter(
        object_type="submissions.submission", object_id=str(submission_id), action="transition"
    ).order_by("created_at", "id")
    return [e.to_state for e in events]


def test_simulated_submission_runs_on_a_database_free_worker_and_is_published_after_review(
    pipeline_settings, live_server, vendor, pool_worker_factory, client
):
    org, token = vendor
    worker = pool_worker_factory(pools=("simulated",))
    started = time.monotonic()
    created = submit(live_server.url, token, small_profile_config())
    assert created["status"] in ("validated", "queued")

    body = wait_for_status(live_server.url, token, created["id"], {"in_review", "failed"})
    elapsed = time.monotonic() - started
    print(f"simulated e2e: submission to in_review in {elapsed:.1f} s")
    assert body["status"] == "in_review", (body, worker.log()[-3000:])

    submission = Submission.objects.get(pk=created["id"])
    run = BenchmarkRun.objects.get(submission=submission)
    assert run.status == BenchmarkRun.STATUS_DONE
    assert run.queue.endswith("pool.simulated")
    assert run.run_spec["launcher"]["clock"] == "real"
    assert "token" not in str(run.run_spec.get("api", ""))  # only the hash is stored
    assert _transitions(submission.pk) == [
        "submitted",
        "validated",
        "queued",
        "running",
        "verifying",
        "in_review",
    ]

    trials = list(run.trials.order_by("index"))
    assert [t.index for t in trials] == list(range(len(trials)))
    assert len(trials) >= 3
    assert [t.concurrency for t in trials[:3]] == [1, 2, 4]
    storage = storages["artifacts"]
    assert storage.__class__.__name__ == "S3Storage"
    for trial in trials:
        assert trial.metrics["requests"] == trial.metrics["ok"] + trial.metrics["failed"]
        with storage.open(trial.raw_records_key, "rb") as handle:
            lines = gzip.decompress(handle.read()).splitlines()
        assert len(lines) == trial.raw_records_count == trial.metrics["requests_total"]
    assert set(run.search_summary["max_agents"]) == {t["name"] for t in run.run_spec["tiers"]}
    assert [c["name"] for c in run.qualification] == [
        "model_listed",
        "streaming",
        "exact_output_length",
        "usage_reported",
        "cached_tokens_reported",
        "ignore_eos",
        "context_fits",
        "reasoning_read",
        "canary_outputs",
    ]
    assert all(c["status"] == "pass" for c in run.qualification), run.qualification

    report = VerificationReport.objects.get(run=run)
    checks = {c["name"]: c["status"] for c in report.checks}
    assert checks["request_accounting"] == "pass"
    assert checks["raw_records_stored"] == "pass"
    assert checks["private_test_set"] == "pass"
    assert checks["telemetry"] == "warn"  # no nvidia-smi here: "not measured", never estimated
    # the checks that catch dishonest deployments (docs/verification.md) pass on the honest sim
    for name in (
        "token_counts",
        "cache_honesty",
        "cache_truth",
        "model_identity",
        "output_lengths",
    ):
        assert checks[name] == "pass", [c for c in report.checks if c["name"] == name]
    # the config claims one accelerator and no speculation, which is what the tiny profile is
    accelerators = next(c for c in report.checks if c["name"] == "accelerators")
    assert (accelerators["status"], accelerators["evidence"]["seen"]) == ("pass", 1)
    assert checks["speculative_decoding"] == "pass"
    assert report.status != "fail", [c for c in report.checks if c["status"] == "fail"]

    # The vendor follows the run and its verification through the vendor API.
    status, run_body = http("GET", f"{live_server.url}/api/v1/runs/{run.pk}/", token=token)
    assert status == 200 and run_body["status"] == "done"

    # A reviewer approves in the admin.
    from tests.support.builders import make_user

    rita = make_user("rita", staff=True)
    rita.is_superuser = True
    rita.save()
    client.force_login(rita)
    page = client.get(f"/admin/runs/benchmarkrun/{run.pk}/review/")
    assert page.status_code == 200 and b"request_accounting" in page.content
    answer = client.post(
        f"/admin/runs/benchmarkrun/{run.pk}/review/",
        {"decision": "approve", "reason": "checks pass", "label": "Tiny sim (CI)"},
    )
    assert answer.status_code == 302
    submission.refresh_from_db()
    assert submission.status == "published"
    result = submission.result
    assert result.is_simulated is True and result.label == "Tiny sim (CI)"
    assert len(result.points) == len(trials)
    assert any(p["frontier"] for p in result.points)
    # each trial's cache truth as the worker stored it: under its sessions' own prefixes,
    # the simulator's counters scraped at the window's edges agreeing (docs/metrics.md)
    truths = [p["cache_truth"] for p in result.points]
    assert {t["verdict"] for t in truths} == {"pass"}, truths
    assert {t["counters"]["status"] for t in truths} == {"agrees"}, truths
    assert all(0.9 <= t["ratio"] <= 1.0 for t in truths), truths
    status, body = http(
        "GET", f"{live_server.url}/api/v1/submissions/{submission.pk}/", token=token
    )
    assert body["status"] == "published"


def test_rack_scale_simulated_submission_runs_on_virtual_time_and_is_labelled_simulated(
    pipeline_settings, live_server, vendor, pool_worker_factory, cast, client
):

    _, token = vendor
    pool_worker_factory(pools=("simulated",))
    text = (EXAMPLES / "simulated.yaml").read_text()
    assert "profile: tiny" not in text  # the example is a multi-accelerator system
    started = time.monotonic()
    created = submit(live_server.url, token, text)
    body = wait_for_status(live_server.url, token, created["id"], {"in_review", "failed"})
    print(f"virtual-time e2e: submission to in_review in {time.monotonic() - started:.1f} s")
    assert body["status"] == "in_review", body
    run = BenchmarkRun.objects.get(submission_id=created["id"])
    assert run.run_spec["launcher"]["clock"] == "virtual"
    trials = list(run.trials.order_by("index"))
    assert trials and all(t.metrics["requests"] > 0 for t in trials)
    assert all(t.telemetry["measured"] is False for t in trials)
    result = review_publish(submission=run.submission, actor=cast.rita, reason="CI")
    assert result.is_simulated is True
    assert result.accelerators_used == run.run_spec["accelerators"]["used"] > 1

    # Modelled power (issue 13 item 5): the worker read the twin's modelled energy from its
    # window scrapes; the published result shows agents per MW labelled "modelled".
    for t in trials:
        scraped = t.telemetry["server_metrics"]
        assert scraped["end"]["sim:modelled_dynamic_energy_joules"] > 0
        block = t.metrics["modelled_energy"]
        assert block["modelled"] is True and block["accelerators"] == result.accelerators_used
        # idle 30 % of the H100's 700 W TDP, dynamic share on top: between idle and TDP
        assert 210.0 <= block["power_w_per_accelerator"] <= 700.0
    assert result.agents_per_mw is None and result.modelled_power["tiers"]
    tier, figures = next(iter(result.modelled_power["tiers"].items()))
    assert figures["agents_per_mw"] > 0 and figures["tokens_per_joule"] > 0
    html = client.get(f"/results/{result.pk}/").content.decode()
    assert "Agents / MW (modelled)" in html and "Modelled power at max agents" in html
    assert f"{figures['agents_per_mw']:,.0f}" in html
    status, body = http("GET", f"{live_server.url}/api/v1/public/results/{result.pk}/")
    assert status == 200 and body["power_source"] == "modelled"
    assert body["modelled_power"]["tiers"][tier]["agents_per_mw"] == pytest.approx(
        figures["agents_per_mw"]
    )
