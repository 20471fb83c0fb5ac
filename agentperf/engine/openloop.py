"""The open-loop search (docs/engine.md "Arrival modes"): the closed loop's search over a
rate instead of a concurrency.

The search logic (``agentperf.engine.search``) works on whole numbers; here search point n is
the Poisson arrival rate ``n * rate_step`` sessions per minute, so the same ramp (one step,
two, four, …), bisection to 5 %, confirmation and marginal repeats find the highest rate
that meets each tier. A trial at rate λ schedules every session that arrives during its
warm-up and window (``open_sessions``): that count is the trial's ``concurrency`` (its
agents), so sharding partitions the sessions by agent id like the closed loop's agents.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from agentperf.engine.replay import ARRIVAL_OPEN, open_sessions
from agentperf.engine.search import SearchResult, SearchTrial
from agentperf.engine.trajectory import Trajectory
from agentperf.engine.trial import TrialConfig

DEFAULT_RATE_CAP = 2048.0  # sessions per minute


def auto_rate_step(
    trajectories: Sequence[Trajectory], duration_s: float, min_requests: int
) -> float:
    """The default step: the rate whose sessions send about twice ``min_requests`` in the
    window at steady state (λ × mean turns per session × window), up to 1, 2 or 5 × 10^k.
    A lower first rate would fail every tier on too few requests and end the ramp there."""
    if not trajectories or duration_s <= 0:
        raise ValueError("an open-loop step needs trajectories and a window")
    mean_turns = sum(len(t.turns) for t in trajectories) / len(trajectories)
    raw = 2 * max(1, min_requests) / (mean_turns * duration_s / 60.0)
    exponent = math.floor(math.log10(raw))
    for mantissa in (1, 2, 5, 10):
        nice = mantissa * 10.0**exponent
        if nice >= raw - 1e-12:
            return round(nice, 9)
    raise AssertionError("unreachable")


def rate_of(n: int, rate_step: float) -> float:
    """The arrival rate (sessions per minute) of search point ``n``."""
    return round(n * rate_step, 9)


def steps_for(rate_cap: float, rate_step: float) -> int:
    """The search cap in steps: the highest rate tried is at least ``rate_cap``."""
    if rate_step <= 0 or rate_cap <= 0:
        raise ValueError("the open loop's rate step and cap must be > 0")
    return max(1, math.ceil(rate_cap / rate_step - 1e-9))


def open_trial_config(base: TrialConfig, n: int, rate_step: float) -> TrialConfig:
    """``base`` (already salted for its trial) at search point n: arrivals at rate
    ``n * rate_step``, and as many agents as sessions arrive before the window ends."""
    rate = rate_of(n, rate_step)
    horizon = base.warmup_s + base.duration_s
    sessions = open_sessions(base.replay.seed, rate, horizon)
    replay = dataclasses.replace(base.replay, arrival=ARRIVAL_OPEN, rate_per_min=rate)
    # at least one agent: a session that arrives after the window sends nothing
    return dataclasses.replace(base, concurrency=max(1, sessions), replay=replay)


def _at(trials: list[SearchTrial], n: int) -> list[SearchTrial]:
    return [t for t in trials if t.concurrency == n]


def _distribution(trial: SearchTrial) -> dict[str, Any]:
    summary = trial.data.get("summary") or {}
    return dict(summary.get("ttft_s") or {})


def open_loop_summary(result: SearchResult, rate_step: float) -> dict[str, Any]:
    """What the open-loop search reports: per tier the highest rate that met it, the mean
    and peak concurrent sessions its trials produced, and their TTFT distribution."""
    tiers: dict[str, Any] = {}
    for name, tier in result.tiers.items():
        at_max = _at(result.trials, tier.max_agents) if tier.max_agents else []
        blocks = [(t.data.get("arrival") or {}).get("concurrent_sessions") or {} for t in at_max]
        means = [float(b["mean"]) for b in blocks if "mean" in b]
        peaks = [int(b["peak"]) for b in blocks if "peak" in b]
        tiers[name] = {
            "max_rate_per_min": rate_of(tier.max_agents, rate_step),
            "lowest_fail_rate_per_min": (
                None if tier.lowest_fail is None else rate_of(tier.lowest_fail, rate_step)
            ),
            "confirmed": tier.confirmed,
            "converged": tier.converged,
            "flags": list(tier.flags),
            "mean_concurrent_sessions": sum(means) / len(means) if means else None,
            "peak_concurrent_sessions": max(peaks) if peaks else None,
            "ttft_s": _distribution(at_max[-1]) if at_max else {},
        }
    return {
        "mode": ARRIVAL_OPEN,
        "rate_step_per_min": rate_step,
        "rate_cap_per_min": rate_of(result.cap, rate_step),
        "flags": list(result.flags),
        "trials": len(result.trials),
        "tiers": tiers,
    }
