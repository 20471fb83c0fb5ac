"""A published frontier point: one trial of a result as the public pages, charts, exports
and the public API read it (``Result.points``; docs/metrics.md has each figure's
definition). ``leaderboard.publishing.trial_point`` builds it from the trial's contract
documents (agentperf/contract.py TrialMetrics, TierVerdict); what is stored is its
:meth:`PublishedPoint.dump`. Read stored points back with ``Result.published_points``:
every block of a point is a model too (its measured energy, modelled energy, intervals,
sessions and cache truth), so no reader takes a stored point apart as a dict.

Fields added after the first results were published have a default, so a point stored
before them reads back (``output_throughput_per_accelerator``: cost per output token;
``intervals``; ``sessions``; ``modelled_energy``; ``cache_truth``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_serializer

from agentperf import contract


class Block(BaseModel):
    """A part of a stored point: unknown keys refused, every field stored."""

    model_config = ConfigDict(extra="forbid")

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Interval(Block):
    """A statistic's session-bootstrap interval (engine.stats; docs/verification.md
    "Statistics"); ``confidence`` None where the trial did not say."""

    low: float
    high: float
    confidence: float | None


class MeasuredEnergy(Block):
    """Power measured on the runner host over the trial's window, with its provenance
    (leaderboard.energy.trial_energy; docs/metrics.md "Per result")."""

    measured: Literal[True]
    tool: str
    method: str
    denominator: str
    coverage: float | None
    max_gap_s: float | None
    power_w: float
    energy_j: float | None
    accelerators_measured: int
    accelerators_used: int
    complete: bool  # every accelerator used was measured
    tokens_per_joule: float | None  # None unless complete

    @property
    def full_power_w(self) -> float | None:
        """The power agents per MW may use: measured over all the accelerators used."""
        return self.power_w if self.complete else None


class UnmeasuredEnergy(Block):
    """No measured power, and why (a simulated result's point says so too)."""

    measured: Literal[False]
    reason: str

    @property
    def full_power_w(self) -> None:
        return None


NOT_MEASURED = UnmeasuredEnergy(measured=False, reason="not measured")


class ModelledEnergy(Block):
    """A simulated trial's power from the simulator's power model, labelled "modelled"
    (leaderboard.energy.trial_modelled_energy); never on a measured result's point."""

    modelled: Literal[True]
    label: str
    power_w: float
    power_w_per_accelerator: float | None
    accelerators: int
    method: str
    tokens_per_joule: float | None


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
    energy: MeasuredEnergy | UnmeasuredEnergy = Field(default_factory=NOT_MEASURED.model_copy)
    modelled_energy: ModelledEnergy | None = None  # simulated results only
    verdicts: dict[str, bool] = Field(default_factory=dict)
    # "p25_speed", "throughput_per_accelerator": a statistic without a finite interval is
    # left out (trials run with resamples = 0)
    intervals: dict[str, Interval] = Field(default_factory=dict)
    sessions: contract.SessionMetrics | None = None  # the trial's session SLOs
    # the trial's cache truth with its window's counters (docs/metrics.md "Cache truth");
    # None: not summarised
    cache_truth: contract.CacheTruth | None = None
    frontier: bool = False  # on the result's Pareto frontier

    @field_serializer("sessions", "cache_truth")
    def _as_sent(self, block: contract.Contract | None) -> dict[str, Any] | None:
        """The trial's contract blocks as the worker sent them (Contract.dump)."""
        return block.dump() if block is not None else None

    def dump(self) -> dict[str, Any]:
        """The stored JSON (every field)."""
        return self.model_dump(mode="json")

    def passed(self, tier: str) -> bool | None:
        """The trial's verdict for ``tier``; None when it was not judged against it."""
        return self.verdicts.get(tier)

    def interval(self, key: str) -> tuple[float | None, float | None]:
        """(low, high) of the interval of ``key``; (None, None) when not measured."""
        found = self.intervals.get(key)
        return (found.low, found.high) if found is not None else (None, None)


POINTS: TypeAdapter[list[PublishedPoint]] = TypeAdapter(list[PublishedPoint])


def published_points(stored: Any) -> list[PublishedPoint]:
    """``Result.points`` read back as models (raises on any other shape)."""
    return POINTS.validate_python(stored or [])


def point_at(points: Sequence[PublishedPoint], n: int | None) -> PublishedPoint | None:
    """The (last) point at concurrency ``n``, as the tiers' figures read it; None when no
    trial ran at ``n`` (or ``n`` is 0 or None: the tier never passed)."""
    if not n:
        return None
    at = [p for p in points if p.concurrency == n]
    return at[-1] if at else None


def by_concurrency(points: Iterable[PublishedPoint]) -> list[PublishedPoint]:
    """Points in chart order: by concurrency, then by trial."""
    return sorted(points, key=lambda p: (p.concurrency, p.index))
