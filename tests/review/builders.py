"""Builders for review-console tests: a submission with a finished run, its trials (metrics in
the engine's own TrialSummary shape), a verification report and stored artifacts."""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from agentperf import contract
from agentperf.engine.metrics import ClientHealth, TrialSummary
from agentperf.engine.trial import TierVerdict
from demo.synthetic import (
    SyntheticTrial,
    make_hardware,
    make_model,
    make_submission,
    make_tier_set,
)
from runs.models import BenchmarkRun, Trial, VerificationReport
from runs.services import trial_row
from submissions import constants as c
from submissions.models import Artifact, Submission
from submissions.services.artifacts import artifact_store
from submissions.services.lifecycle import submission_transition

CONFIG = {
    "schema_version": 1,
    "model": {"id": "m", "weight_precision": "fp4", "kv_cache_dtype": "fp8"},
    "engine": {"name": "vllm", "version": "0.14.0", "args": {"max_num_seqs": 256}},
    "topology": {"mode": "aggregated", "accelerators_used": 8},
}

# (phase, concurrency, p25 speed, TTFT p75) — a ramp, a bisection and a confirmation.
SEARCH = [
    ("ramp", 1, 210.0, 0.4),
    ("ramp", 2, 190.0, 0.5),
    ("ramp", 4, 150.0, 0.9),
    ("ramp", 8, 95.0, 2.0),
    ("ramp", 16, 50.0, 6.0),
    ("ramp", 32, 18.0, 14.0),
    ("bisect", 24, 31.0, 9.0),
    ("confirm", 24, 30.0, 9.5),
]

CHECKS = [
    {
        "name": "fidelity",
        "status": "pass",
        "summary": "every output had exactly its target length",
        "rule": "n_out == target for every request in the window",
        "evidence": {"requests": 1200, "wrong_length": 0, "token_count": {"max_rel_diff": 0.004}},
    },
    {
        "name": "cache_honesty",
        "status": "warn",
        "summary": "cached tokens close to the honest maximum",
        "rule": "reported cached <= honest maximum",
        "evidence": {"reported": 9100, "honest_max": 9200, "samples": [{"agent": 3, "turn": 7}]},
    },
]


def summary_dict(*, concurrency: int, p25: float, ttft_p75: float | None, accelerators=8) -> dict:
    """Trial.metrics as the runner stores it (`summary_metrics` dumped)."""
    return summary_metrics(
        concurrency=concurrency, p25=p25, ttft_p75=ttft_p75, accelerators=accelerators
    ).dump()


def summary_metrics(
    *, concurrency: int, p25: float, ttft_p75: float | None, accelerators=8
) -> contract.TrialMetrics:
    """A trial's metrics as the runner reports them: the engine's TrialSummary through the
    contract (agentperf/contract.py TrialMetrics)."""
    ttft = {"p50": (ttft_p75 or 0) * 0.7, "p75": ttft_p75, "p90": None, "p95": None, "p99": None}
    summary = TrialSummary(
        window_start_ns=0,
        window_end_ns=60 * 10**9,
        window_s=60.0,
        requests=40 * concurrency,
        ok=40 * concurrency,
        failed=0,
        errors_by_class={},
        error_rate=0.0,
        p25_output_speed=p25,
        median_output_speed=p25 * 1.2,
        ttft_s={k: (float("inf") if v is None else v) for k, v in ttft.items()},
        cache_hit_ratio=0.8,
        input_tokens=1e6,
        output_tokens=1e5,
        throughput_tok_s=18000.0 * concurrency**0.5,
        output_throughput_tok_s=1600.0,
        throughput_per_accelerator=2250.0 * concurrency**0.5,
        accelerators=accelerators,
        accelerators_total=8,
        mean_in_flight=concurrency * 0.9,
        client=ClientHealth(loop_lag_p99_ms=2.0, cpu_percent=20.0),
        requests_total=50 * concurrency,
        speed_undefined=0,
    )
    return contract.TrialMetrics.of(summary)


def make_reviewable(
    *,
    org,
    status: str = c.IN_REVIEW,
    config: dict | None = None,
    checks: list[dict] | None = None,
    verification: str = "warn",
    artifacts: bool = False,
    **fields: Any,
) -> Submission:
    """A submission with a finished run (trials, search summary, verification)."""
    model = fields.pop("model", None) or make_model()
    hardware = fields.pop("hardware", None) or make_hardware()
    sub = make_submission(
        org=org,
        status=status,
        model=model,
        hardware=hardware,
        config=config if config is not None else CONFIG,
        **fields,
    )
    finish_run(sub, checks=checks, verification=verification, artifacts=artifacts)
    return sub


def finish_run(
    sub: Submission,
    *,
    run: BenchmarkRun | None = None,
    checks: list[dict] | None = None,
    verification: str = "warn",
    artifacts: bool = False,
) -> BenchmarkRun:
    """Give `sub` a finished run as the runner would leave it: the trials of SEARCH with
    verdicts against a tier set, the search summary, a verification report and, optionally,
    a runner log and raw records in the artifact store. `run` (e.g. the one dispatch made)
    is completed in place; otherwise a new run is created."""
    tier_set = make_tier_set()
    tiers = [t.name for t in tier_set.tiers.all()]
    speeds = {t.name: (t.min_p25_output_speed, t.max_ttft_s) for t in tier_set.tiers.all()}
    if run is None:
        run = BenchmarkRun.objects.create(submission=sub)
    run.tier_set = tier_set
    run.status = BenchmarkRun.STATUS_DONE
    run.runner_host = "runner-1"
    run.queue = run.queue or f"pool.{sub.hardware.runner_pool}"
    run.save()
    trials = []
    for index, (phase, n, p25, ttft) in enumerate(SEARCH):
        verdicts = {}
        for name, (speed, max_ttft) in speeds.items():
            reasons = []
            if p25 < speed:
                reasons.append(f"p25 speed {p25:g} < {speed:g} tok/s")
            if ttft > max_ttft:
                reasons.append(f"TTFT p75 {ttft:g} s > {max_ttft:g} s")
            # the engine's own verdict shape, as the worker reports it
            verdicts[name] = contract.TierVerdict.of(
                TierVerdict(passed=not reasons, reasons=reasons)
            )
        # the row as runs.services.run_record_trial stores a worker's report
        trial = trial_row(
            run,
            SyntheticTrial(
                index=index,
                concurrency=n,
                phase=phase,
                metrics=summary_metrics(concurrency=n, p25=p25, ttft_p75=ttft),
                verdicts=verdicts,
                telemetry=contract.TrialTelemetry(measured=False, reason="not measured"),
            ),
        )
        trial.save(force_insert=True)
        trials.append(trial)
    max_agents = {}
    for name in tiers:
        passing = [t.concurrency for t in trials if t.verdicts[name]["passed"]]
        max_agents[name] = max(passing, default=0)
    run.search_summary = contract.SearchSummary.model_validate(
        {
            "cap": 64,
            "flags": [],
            "max_agents": max_agents,
            "tiers": {
                name: {
                    "name": name,
                    "max_agents": max_agents[name],
                    "lowest_fail": None,
                    "confirmed": name == "20 tok/s",
                    "converged": True,
                    "flags": [] if name == "20 tok/s" else ["unconfirmed"],
                }
                for name in tiers
            },
            "trials": [],
        }
    ).dump()
    run.save(update_fields=["search_summary"])
    VerificationReport.objects.create(
        run=run, status=verification, checks=checks if checks is not None else CHECKS
    )
    if artifacts:
        # unique per call: stored objects outlive the test database's ids
        prefix = f"test-review/{uuid.uuid4().hex}/runs/{run.pk}"
        key = f"{prefix}/trial-0/requests.jsonl"
        artifact_store(
            kind=Artifact.KIND_RAW_RECORDS,
            key=key,
            content=_one_record_jsonl(),
            content_type="application/x-ndjson",
            org=sub.org,
            run=run,
        )
        Trial.objects.filter(run=run, index=0).update(raw_records_key=key)
        artifact_store(
            kind=Artifact.KIND_LOG,
            key=f"{prefix}/runner.log",
            content=b"runner started\n",
            content_type="text/plain",
            org=sub.org,
            run=run,
        )
    return run


PATH_TO_REVIEW = (c.SUBMITTED, c.VALIDATED, c.QUEUED, c.RUNNING, c.VERIFYING, c.IN_REVIEW)


def _one_record_jsonl() -> bytes:
    """One request record as the engine writes it (agentperf.engine.metrics.RequestRecord)."""
    from agentperf.engine.metrics import RequestRecord

    record = RequestRecord(
        request_id="a0-s0-t0",
        agent_id=0,
        session_id="s0",
        trajectory_id="traj-0",
        turn_index=0,
        target_output_tokens=64,
        t_send_ns=1_000_000_000,
        t_first_ns=1_200_000_000,
        t_last_ns=2_000_000_000,
        t_end_ns=2_000_000_000,
        n_reads=64,
        n_output_events=64,
        n_in=1000,
        n_out=64,
        n_cached=0,
        local_prompt_tokens=1000,
        ok=True,
        error_class=None,
        error_detail="",
        http_status=200,
        finish_reason="length",
    )
    return orjson.dumps(record.to_dict()) + b"\n"


def advance_to_in_review(sub: Submission) -> Submission:
    """Walk a submission through the lifecycle to in_review from wherever it is."""
    sub.refresh_from_db()
    start = PATH_TO_REVIEW.index(sub.status) + 1 if sub.status in PATH_TO_REVIEW else 0
    for state in PATH_TO_REVIEW[start:]:
        submission_transition(submission=sub, to=state, actor_label="test-runner")
    return sub
