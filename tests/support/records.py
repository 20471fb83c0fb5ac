"""Results whose trials carry real raw records: the records are synthetic (agents walking
sessions turn by turn with tool delays), everything after them is the real code — the
engine's summarize, tier verdicts, session-bootstrap intervals and marginal marks, the
search's tier results, gzip JSONL stored through ``artifact_store`` (SeaweedFS S3 under
tests.services), and ``result_publish``."""

from __future__ import annotations

import gzip
import hashlib
import random
from dataclasses import dataclass

import orjson

from agentperf import contract
from agentperf.engine.metrics import NS, RequestRecord, summarize
from agentperf.engine.search import SearchResult, SearchTrial, tier_results
from agentperf.engine.stats import min_requests_table, trial_intervals
from agentperf.engine.trial import Tier, evaluate_tiers, mark_marginal
from demo.synthetic import (
    dispatched,
    finished,
    make_hardware,
    make_model,
    make_org,
    make_submission,
    make_tier_set,
    started,
    submission_validated,
)

WARMUP_S = 10.0
WINDOW_S = 60.0


def request_record(*, t: int = 0, **fields: object) -> RequestRecord:
    """One finished, successful request sent at ``t`` ns (first token 1 ns later, last 2, end
    3), 100 tokens in and 8 out; ``fields`` replace the defaults."""
    defaults: dict[str, object] = {
        "request_id": "r0",
        "agent_id": 0,
        "session_id": "a0s0",
        "trajectory_id": "t",
        "turn_index": 0,
        "target_output_tokens": 8,
        "t_send_ns": t,
        "t_first_ns": t + 1,
        "t_last_ns": t + 2,
        "t_end_ns": t + 3,
        "n_reads": 8,
        "n_output_events": 8,
        "n_in": 100,
        "n_out": 8,
        "n_cached": None,
        "local_prompt_tokens": None,
        "ok": True,
    }
    return RequestRecord(**{**defaults, **fields})  # type: ignore[arg-type]


@dataclass(slots=True)
class Shape:
    """How one trial's agents behave: per-agent speed level and TTFT."""

    concurrency: int
    speed: float  # tok/s, each agent's level varies around it
    ttft_s: float
    spread: float = 0.25  # relative spread of agent levels (wide → wide intervals)


def session_records(shape: Shape, *, seed: int, turns_per_session: int = 6) -> list[RequestRecord]:
    """Records of `shape.concurrency` agents over warm-up + window + drain: each agent walks
    sessions of `turns_per_session` turns, a tool delay between turns; the prompt grows by
    the last output and is cached up to the previous prompt."""
    rng = random.Random(seed)
    out: list[RequestRecord] = []
    end_ns = int((WARMUP_S + WINDOW_S) * NS)
    i = 0
    for agent in range(shape.concurrency):
        level = shape.speed * (1 + rng.uniform(-shape.spread, shape.spread))
        t = int(rng.uniform(0, WARMUP_S / 2) * NS)
        session = 0
        while t < end_ns:
            n_in, cached = rng.randint(4000, 9000), 0
            for turn in range(turns_per_session):
                if t >= end_ns:
                    break
                n_out = rng.choice([40, 80, 150, 300])
                ttft = shape.ttft_s * rng.uniform(0.7, 1.3)
                speed = level * rng.uniform(0.9, 1.1)
                t_first = t + int(ttft * NS)
                t_last = t_first + int((n_out - 1) / speed * NS)
                out.append(
                    RequestRecord(
                        request_id=f"r{i}",
                        agent_id=agent,
                        session_id=f"a{agent}s{session}",
                        trajectory_id=f"traj-{(agent + session) % 7}",
                        turn_index=turn,
                        target_output_tokens=n_out,
                        t_send_ns=t,
                        t_first_ns=t_first,
                        t_last_ns=t_last,
                        t_end_ns=t_last + 1_000_000,
                        n_reads=n_out,
                        n_output_events=n_out,
                        n_in=n_in,
                        n_out=n_out,
                        n_cached=cached,
                        local_prompt_tokens=n_in,
                        ok=True,
                    )
                )
                i += 1
                cached = n_in
                n_in += n_out + rng.randint(200, 2000)
                t = t_last + 1_000_000 + int(rng.uniform(0.3, 2.0) * NS)
            session += 1
    out.sort(key=lambda r: r.t_send_ns)
    return out


def records_blob(records: list[RequestRecord]) -> bytes:
    """The worker's raw-records format (runner/worker/director.py records_blob)."""
    lines = b"".join(orjson.dumps(r.to_dict()) + b"\n" for r in records)
    return gzip.compress(lines, compresslevel=6, mtime=0)


def _measured_trial(
    run, index: int, shape: Shape, phase: str, *, tiers: list[Tier], resamples: int
) -> contract.TrialReport:
    """One trial as the pool worker reports it: its raw records put where the upload grant
    points (runs.services.upload_key), the engine's summary, verdicts, session-bootstrap
    intervals and marginal marks over them."""
    from django.core.files.base import ContentFile
    from django.core.files.storage import storages

    from runs.services import upload_key
    from submissions.models import Artifact

    accelerators = run.spec.accelerators.used
    w0, w1 = int(WARMUP_S * NS), int((WARMUP_S + WINDOW_S) * NS)
    records = session_records(shape, seed=index + 1)
    ps = {t.ttft_percentile for t in tiers}
    summary = summarize(
        records,
        window_start_ns=w0,
        window_end_ns=w1,
        accelerators=accelerators,
        extra_ttft_percentiles=ps,
    )
    verdicts = evaluate_tiers(summary, tiers, min_requests=20)
    intervals = trial_intervals(
        records,
        window_start_ns=w0,
        window_end_ns=w1,
        ttft_percentiles=ps,
        resamples=resamples,
        seed=index,
        accelerators=accelerators,
    )
    mark_marginal(verdicts, tiers, intervals, summary, min_requests=20)
    statistics = {
        "intervals": {k: v.to_dict() for k, v in intervals.items()},
        "min_requests": min_requests_table({25.0, *ps}),
        "marginal": sorted(n for n, v in verdicts.items() if v.marginal),
    }
    blob = records_blob(records)
    key = upload_key(run, kind=Artifact.KIND_RAW_RECORDS, trial_index=index)
    storage = storages["artifacts"]
    if storage.exists(key):  # as the upload target replaces it (runs/api.py BlobView)
        storage.delete(key)
    storage.save(key, ContentFile(blob))
    return contract.TrialReport(
        index=index,
        concurrency=shape.concurrency,
        phase=phase,
        metrics=contract.TrialMetrics.of(summary, statistics=statistics),
        verdicts={k: contract.TierVerdict.of(v) for k, v in verdicts.items()},
        telemetry=contract.TrialTelemetry(measured=False, reason="not measured"),
        raw_records=contract.RawRecordsRef(
            key=key, sha256=hashlib.sha256(blob).hexdigest(), size=len(blob), count=len(records)
        ),
    )


def _search_summary(run, reports: list[contract.TrialReport]) -> dict:
    """The completion's search summary: the engine's search result over the stored trials."""
    searched = [
        SearchTrial(
            r.index,
            r.concurrency,
            r.phase,
            {k: v.passed for k, v in r.verdicts.items()},
            marginal=sorted(k for k, v in r.verdicts.items() if v.marginal),
        )
        for r in reports
    ]
    cap = max(r.concurrency for r in reports)
    results = tier_results(searched, [t.name for t in run.spec.tiers], cap=cap)
    return contract.SearchSummary.of(SearchResult(searched, results, cap=cap, flags=[])).dump()


def make_result_with_records(
    *,
    shapes: list[Shape],
    accelerators: int = 8,
    label: str = "With records",
    model=None,
    hardware=None,
    tier_set=None,
    resamples: int = 300,
):
    """A published Result whose every trial was measured from raw records in storage, taken
    through the pipeline: submitted, dispatched and started (demo.synthetic), each trial
    stored by runs.services.run_record_trial, completed and taken to review without a
    report (demo.synthetic.finished: run_complete's verification fails a run with no
    qualification and no test set), and published by result_publish."""
    from leaderboard.publishing import result_publish
    from runs.services import run_record_trial

    model = model or make_model()
    hardware = hardware or make_hardware()
    tier_set = tier_set or make_tier_set()
    submission = submission_validated(
        make_submission(org=make_org(), model=model, hardware=hardware, config={})
    )
    run = started(
        dispatched(
            submission,
            tier_set=tier_set,
            accelerators=accelerators,
            cap=64,
            warmup_s=WARMUP_S,
            duration_s=WINDOW_S,
        )
    )
    tiers = run.spec.engine_tiers()
    reports = []
    for index, shape in enumerate(shapes):
        seen = any(s.concurrency == shape.concurrency for s in shapes[:index])
        report = _measured_trial(
            run, index, shape, "confirm" if seen else "ramp", tiers=tiers, resamples=resamples
        )
        run_record_trial(run=run, attempt=run.attempt, report=report)
        reports.append(report)
    finished(run, _search_summary(run, reports), trials=len(reports))
    return result_publish(submission=submission, run=run, label=label)
