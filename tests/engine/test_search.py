"""The SLO-tier search against scripted oracles (no trial is really run here)."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from agentperf.engine.search import (
    FLAG_CAPPED,
    FLAG_FAILED_CONFIRMATION,
    FLAG_NON_MONOTONE,
    PHASE_CONFIRM,
    PHASE_RAMP,
    SearchResult,
    SearchTrial,
    TrialOutcome,
    next_step,
    ramp_points,
    run_search,
    tolerance,
)

Oracle = Callable[[int, str], bool]  # (concurrency, tier) -> pass


def search(
    oracle: Oracle,
    tiers: list[str],
    cap: int = 4096,
    prior: list[SearchTrial] | None = None,
    stop_after: int | None = None,
) -> SearchResult:
    seen: list[SearchTrial] = []

    async def execute(n: int, phase: str, index: int) -> TrialOutcome:
        if stop_after is not None and index >= stop_after:
            raise RuntimeError("worker crashed")
        return TrialOutcome({t: oracle(n, t) for t in tiers}, {"n": n})

    return asyncio.run(
        run_search(execute, tiers, cap=cap, prior_trials=prior or [], on_trial=seen.append)
    )


def capacity_oracle(capacity: dict[str, int]) -> Oracle:
    return lambda n, tier: n <= capacity[tier]


def within_tolerance(found: int, true: int) -> bool:
    return found <= true and true - found <= tolerance(found)


def test_ramp_points_double_up_to_the_cap() -> None:
    assert ramp_points(20) == [1, 2, 4, 8, 16, 20]
    assert ramp_points(16) == [1, 2, 4, 8, 16]


def test_monotone_oracle_finds_every_tier_within_tolerance() -> None:
    capacity = {"a": 300, "b": 97, "c": 41, "d": 7, "e": 1}
    result = search(capacity_oracle(capacity), list(capacity))
    for tier, true in capacity.items():
        found = result.tiers[tier]
        assert within_tolerance(found.max_agents, true), (tier, found)
        assert found.confirmed
        assert found.flags == []
    assert result.flags == []


def test_tier_failing_at_one_agent_has_zero_max_agents_and_no_confirmation() -> None:
    result = search(capacity_oracle({"easy": 10, "hard": 0}), ["easy", "hard"])
    assert result.tiers["hard"].max_agents == 0
    assert result.tiers["hard"].lowest_fail == 1
    confirms = [t.concurrency for t in result.trials if t.phase == PHASE_CONFIRM]
    assert confirms == [result.tiers["easy"].max_agents]


def test_search_starts_with_an_exponential_ramp() -> None:
    result = search(capacity_oracle({"a": 50}), ["a"])
    ramp = [t.concurrency for t in result.trials if t.phase == PHASE_RAMP]
    assert ramp == [1, 2, 4, 8, 16, 32, 64]


def test_a_tier_passing_at_the_cap_is_flagged_capped() -> None:
    result = search(capacity_oracle({"a": 10_000}), ["a"], cap=100)
    assert result.tiers["a"].max_agents == 100
    assert FLAG_CAPPED in result.tiers["a"].flags
    assert max(t.concurrency for t in result.trials) == 100


def test_non_monotone_oracle_is_flagged_and_the_result_stays_below_the_first_fail() -> None:
    # "a" passes up to 20 but fails at 4 (a hiccup); "b" keeps the ramp going past it
    result = search(lambda n, t: n <= 100 if t == "b" else (n <= 20 and n != 4), ["a", "b"])
    tier = result.tiers["a"]
    assert FLAG_NON_MONOTONE in tier.flags
    assert tier.max_agents < 4
    assert FLAG_NON_MONOTONE in result.flags


def test_a_failed_confirmation_is_flagged_and_the_search_goes_below_it() -> None:
    calls: dict[int, int] = {}

    def flaky(n: int, tier: str) -> bool:
        calls[n] = calls.get(n, 0) + 1
        if n >= 30:  # passes the first time, fails on any repeat
            return n <= 45 and calls[n] == 1
        return True

    result = search(flaky, ["a"])
    tier = result.tiers["a"]
    first_confirm = next(t for t in result.trials if t.phase == PHASE_CONFIRM)
    assert first_confirm.concurrency >= 30 and not first_confirm.verdicts["a"]
    assert FLAG_FAILED_CONFIRMATION in tier.flags
    assert tier.max_agents < 30
    assert tier.confirmed


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(0.0, 0.15))
def test_noisy_oracle_never_reports_above_a_failure_and_terminates(seed: int, noise: float) -> None:
    rng = random.Random(seed)
    capacity = {"a": rng.randint(1, 500), "b": rng.randint(1, 500)}

    def noisy(n: int, tier: str) -> bool:
        truth = n <= capacity[tier]
        return truth if rng.random() >= noise else not truth

    result = search(noisy, ["a", "b"], cap=1024)
    assert len(result.trials) <= 60
    for tier in ("a", "b"):
        r = result.tiers[tier]
        fails = [t.concurrency for t in result.trials if not t.verdicts[tier]]
        if fails:
            assert r.max_agents < min(fails)
        if r.max_agents:
            runs = [t.verdicts[tier] for t in result.trials if t.concurrency == r.max_agents]
            assert all(runs)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from("abcde"), st.integers(0, 3000), min_size=1))
def test_monotone_search_is_within_tolerance_for_any_capacities(capacity: dict[str, int]) -> None:
    result = search(capacity_oracle(capacity), sorted(capacity))
    for tier, true in capacity.items():
        assert within_tolerance(result.tiers[tier].max_agents, true)
        assert result.tiers[tier].converged


def test_resuming_from_stored_trials_runs_no_trial_twice() -> None:
    capacity = {"a": 300, "b": 41, "c": 7}
    full = search(capacity_oracle(capacity), list(capacity))
    stored: list[SearchTrial] = []

    async def crash_after_five(n: int, phase: str, index: int) -> TrialOutcome:
        if index >= 5:
            raise RuntimeError("worker crashed")
        return TrialOutcome({t: n <= capacity[t] for t in capacity})

    try:
        asyncio.run(run_search(crash_after_five, list(capacity), cap=4096, on_trial=stored.append))
    except RuntimeError:
        pass
    assert len(stored) == 5
    resumed = search(
        capacity_oracle(capacity),
        list(capacity),
        prior=[SearchTrial.from_dict(t.to_dict()) for t in stored],
    )
    assert [t.concurrency for t in resumed.trials] == [t.concurrency for t in full.trials]
    assert resumed.to_dict()["max_agents"] == full.to_dict()["max_agents"]


def test_progress_is_reported_before_each_trial() -> None:
    events: list[tuple[str, int, int]] = []

    async def execute(n: int, phase: str, index: int) -> TrialOutcome:
        return TrialOutcome({"a": n <= 3})

    result = asyncio.run(run_search(execute, ["a"], cap=64, progress=lambda *e: events.append(e)))
    assert events == [(t.phase, t.index, t.concurrency) for t in result.trials]


def baseline_trial_count(capacity: dict[str, int], cap: int) -> int:
    """A plain ramp, then an independent bisection and a confirmation per tier."""
    ramp = []
    for n in ramp_points(cap):
        ramp.append(n)
        if all(n > c for c in capacity.values()):
            break
    count = len(ramp)
    for c in capacity.values():
        passes = [n for n in ramp if n <= c]
        lo = max(passes) if passes else 0
        hi = min((n for n in ramp if n > c), default=None)
        if hi is None:
            count += 1 if lo else 0
            continue
        while hi - lo > tolerance(lo):
            mid = (lo + hi) // 2
            count += 1
            if mid <= c:
                lo = mid
            else:
                hi = mid
        count += 1 if lo else 0
    return count


def test_search_needs_fewer_trials_than_ramp_plus_independent_bisections() -> None:
    # the project's default five tiers on a plausible system: close capacities share trials
    capacity = {"20": 410, "60": 380, "100": 150, "180": 140, "300": 9}
    result = search(capacity_oracle(capacity), list(capacity))
    assert len(result.trials) < baseline_trial_count(capacity, 4096)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 2000), min_size=2, max_size=5))
def test_search_never_needs_more_trials_than_the_baseline(caps: list[int]) -> None:
    capacity = {f"t{i}": c for i, c in enumerate(caps)}
    result = search(capacity_oracle(capacity), list(capacity))
    assert len(result.trials) <= baseline_trial_count(capacity, 4096)


def test_next_step_of_no_trials_is_the_first_ramp_point() -> None:
    assert next_step([], ["a", "b"], cap=8) == (PHASE_RAMP, 1)


def test_tolerance_is_five_percent_or_one() -> None:
    assert tolerance(10) == 1
    assert tolerance(400) == 20
    assert math.isclose(tolerance(0), 1)
