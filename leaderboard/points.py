"""A published frontier point: one trial of a result as the public pages, charts, exports
and the public API read it (``Result.points``; docs/metrics.md has each figure's
definition). ``leaderboard.publishing.trial_point`` builds it from the trial's contract
documents (agentperf/contract.py TrialMetrics, TierVerdict); what is stored is its
:meth:`PublishedPoint.dump`. Read stored points back with ``Result.published_points``.

Fields added after the first results were published have a default, so a point stored
before them reads back (``output_throughput_per_accelerator``: cost per output token;
``intervals``; ``sessions``; ``modelled_energy``; ``cache_truth``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class PublishedPoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: int
    concurrency: int = Field(ge=1)
    phase: str
    p25_speed: float  # the trial's p25 output speed per agent, tok/s (x of the frontier)
    median_speed: float | None = None
    ttft_s: dict[str, float | None] = Field(default_factory=dict)  # "p50".."p99"
    ttft_p75_s: float | None = None
    throughput_per_accelerator: float  # tok/s per accelerator (y of the frontier)
    output_throughput_per_accelerator: float | None = None
    agents_per_accelerator: float
    error_rate: float | None = None
    cache_hit_ratio: float | None = None
    mean_in_flight: float | None = None
    requests: int | None = None
    power_w: float | None = None  # measured over every accelerator used; never modelled
    energy: dict[str, Any] = Field(default_factory=dict)  # leaderboard.energy.trial_energy
    modelled_energy: dict[str, Any] | None = None  # trial_modelled_energy (simulated only)
    verdicts: dict[str, bool] = Field(default_factory=dict)
    intervals: dict[str, dict[str, Any]] = Field(default_factory=dict)
    sessions: dict[str, Any] | None = None  # the trial's session SLOs (contract.SessionMetrics)
    # the trial's cache truth with its window's counters (contract.CacheTruth,
    # docs/metrics.md "Cache truth"); None: not summarised
    cache_truth: dict[str, Any] | None = None
    frontier: bool = False  # on the result's Pareto frontier

    def dump(self) -> dict[str, Any]:
        """The stored JSON (every field)."""
        return self.model_dump(mode="json")


POINTS: TypeAdapter[list[PublishedPoint]] = TypeAdapter(list[PublishedPoint])


def published_points(stored: Any) -> list[PublishedPoint]:
    """``Result.points`` read back as models (raises on any other shape)."""
    return POINTS.validate_python(stored or [])
