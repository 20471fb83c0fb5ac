"""Bootstrap intervals by agent session, the MLPerf-style minimum request count, and the
search spending repeat trials on marginal verdicts."""

from __future__ import annotations

import asyncio
import random

import pytest

from agentperf.engine.metrics import RequestRecord
from agentperf.engine.search import PHASE_REPEAT, SearchTrial, TrialOutcome, next_step, run_search
from agentperf.engine.stats import (
    group_by_session,
    min_requests,
    min_requests_table,
    mlperf_min_requests,
    percentile_coverage,
    trial_intervals,
)

NS = 1_000_000_000


def record(agent: int, session: str, speed: float, ttft: float, i: int) -> RequestRecord:
    t_send = i * NS // 10
    t_first = t_send + int(ttft * NS)
    n_out = 101
    return RequestRecord(
        request_id=f"r{i}",
        agent_id=agent,
        session_id=session,
        trajectory_id="t",
        turn_index=i,
        target_output_tokens=n_out,
        t_send_ns=t_send,
        t_first_ns=t_first,
        t_last_ns=t_first + int((n_out - 1) / speed * NS),
        t_end_ns=None,
        n_reads=10,
        n_output_events=10,
        n_in=100,
        n_out=n_out,
        n_cached=0,
        local_prompt_tokens=100,
        ok=True,
    )


def sessions(n_sessions: int, per_session: int, *, seed: int = 1) -> list[RequestRecord]:
    """Sessions whose speeds are correlated: each session has its own level."""
    rng = random.Random(seed)
    out, i = [], 0
    for s in range(n_sessions):
        level = rng.uniform(40, 120)
        for _ in range(per_session):
            out.append(record(s, f"a{s}s0", level * rng.uniform(0.95, 1.05), 0.5, i))
            i += 1
    return out


def test_the_bootstrap_interval_contains_the_estimate_and_is_seeded():
    records = sessions(20, 10)
    a = trial_intervals(records, window_start_ns=0, window_end_ns=10**15, seed=4)
    b = trial_intervals(records, window_start_ns=0, window_end_ns=10**15, seed=4)
    speed = a["p25_output_speed"]
    assert speed.low <= speed.estimate <= speed.high
    assert speed.to_dict() == b["p25_output_speed"].to_dict()
    assert speed.sessions == 20 and speed.requests == 200


def test_resampling_whole_sessions_gives_a_wider_interval_than_resampling_requests():
    records = sessions(20, 10)
    by_session = trial_intervals(records, window_start_ns=0, window_end_ns=10**15)
    # the same records with every request its own session: correlation ignored
    lone = [
        RequestRecord.from_dict({**r.to_dict(), "session_id": f"x{i}", "agent_id": i})
        for i, r in enumerate(records)
    ]
    by_request = trial_intervals(lone, window_start_ns=0, window_end_ns=10**15)
    assert len(group_by_session(lone)) == 200
    assert by_session["p25_output_speed"].width > 1.5 * by_request["p25_output_speed"].width


def test_an_interval_straddling_a_tier_threshold_marks_the_verdict_marginal():
    from agentperf.engine.metrics import summarize
    from agentperf.engine.trial import Tier, evaluate_tiers, mark_marginal

    records = sessions(12, 8)
    summary = summarize(records, window_start_ns=0, window_end_ns=10**15, accelerators=1)
    intervals = trial_intervals(records, window_start_ns=0, window_end_ns=10**15)
    speed = intervals["p25_output_speed"]
    tiers = [Tier("inside", (speed.low + speed.high) / 2, 10.0), Tier("below", speed.low / 2, 10.0)]
    verdicts = evaluate_tiers(summary, tiers, min_requests=1)
    mark_marginal(verdicts, tiers, intervals, summary, min_requests=1)
    assert verdicts["inside"].marginal is True
    assert verdicts["below"].marginal is False and verdicts["below"].passed is True


def test_minimum_requests_for_p25_at_99_percent_within_5_points_is_494():
    assert min_requests(0.25, confidence=0.99, margin=0.05) == 494
    assert percentile_coverage(494, 0.25, 0.05) >= 0.99 > percentile_coverage(493, 0.25, 0.05)
    # MLPerf's normal approximation for its p90 ± 0.5% rule (it rounds 23,886 up to 24,576)
    assert mlperf_min_requests(0.9, confidence=0.99, margin=0.005) == 23886


def test_the_minimum_request_table_tightens_the_band_for_tail_percentiles():
    table = min_requests_table([25, 75, 99])
    assert table["p25"]["min_requests"] == table["p75"]["min_requests"] == 494
    assert table["p99"]["margin"] == pytest.approx(0.005)
    assert table["p99"]["min_requests"] > 2000


def _scripted(verdict_at, marginal_at):
    async def execute(n: int, phase: str, index: int) -> TrialOutcome:
        passed = verdict_at(n, index)
        return TrialOutcome({"t": passed}, {}, ["t"] if n in marginal_at else [])

    return execute


def test_the_search_repeats_a_marginal_bound_until_three_trials_decide_it():
    # N=4 passes marginally the first time, fails the second and third: majority fails
    calls: dict[int, int] = {}

    def verdict(n: int, index: int) -> bool:
        calls[n] = calls.get(n, 0) + 1
        if n == 4:
            return calls[n] == 1
        return n < 4

    result = asyncio.run(run_search(_scripted(verdict, {4}), ["t"], cap=8, max_trials=20))
    at_4 = [t for t in result.trials if t.concurrency == 4]
    assert len(at_4) == 3
    assert [t.phase for t in at_4][1:] == [PHASE_REPEAT, PHASE_REPEAT]
    assert result.tiers["t"].max_agents == 3


def test_a_marginal_trial_below_the_bounds_costs_no_repeat():
    trials = [
        SearchTrial(0, 1, "ramp", {"t": True}, marginal=["t"]),
        SearchTrial(1, 2, "ramp", {"t": True}),
        SearchTrial(2, 4, "ramp", {"t": False}),
        SearchTrial(3, 3, "bisect", {"t": True}),
    ]
    assert next_step(trials, ["t"], cap=4) == ("confirm", 3)


def test_stored_trials_carry_their_marginal_tiers_inside_the_verdicts():
    stored = {
        "index": 0,
        "concurrency": 2,
        "phase": "ramp",
        "verdicts": {"t": True},
        "data": {"verdicts": {"t": {"passed": True, "marginal": True}}},
    }
    assert SearchTrial.from_dict(stored).marginal == ["t"]
