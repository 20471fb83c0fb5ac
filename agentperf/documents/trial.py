"""A trial's documents (docs/pipeline.md "The contract"): what ``Trial.metrics``,
``Trial.verdicts`` and ``Trial.telemetry`` store — the engine's summary and verdicts under
the contract's rules, with the trial's bootstrap statistics, its load generator when it
was sharded, and the power measured (or, on the simulator, modelled) over its window."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from agentperf.documents.rules import Complete, Contract, Count, Positive
from agentperf.documents.shards import LoadGenerator
from agentperf.engine.cachetruth import CacheCounters as EngineCacheCounters
from agentperf.engine.cachetruth import CacheTruth as EngineCacheTruth
from agentperf.engine.metrics import ClientHealth as EngineClientHealth
from agentperf.engine.metrics import TrialSummary
from agentperf.engine.trial import TierVerdict as EngineTierVerdict


class TierVerdict(Complete, EngineTierVerdict):
    """One tier's verdict on one trial: the engine's own model (agentperf/engine/trial.py,
    docs/engine.md), every field required; ``ttft_s`` is null in JSON when infinite."""

    model_config = Contract.model_config

    @classmethod
    def of(cls, verdict: EngineTierVerdict) -> TierVerdict:
        return cls.model_validate(verdict.to_dict())


class ClientHealth(Complete, EngineClientHealth):
    """The load generator's health over the window: the engine's own model
    (agentperf.engine.metrics.ClientHealth), every field required."""

    model_config = Contract.model_config


class CacheCounters(Complete, EngineCacheCounters):
    """The server's prefix-cache counters over a window against the requests' own cached
    counts: the engine's model (agentperf.engine.cachetruth), every field required."""

    model_config = Contract.model_config


class CacheTruth(Complete, EngineCacheTruth):
    """A trial's cache truth (agentperf.engine.cachetruth, docs/metrics.md "Cache truth"):
    the engine's model, every field required."""

    model_config = Contract.model_config

    counters: CacheCounters | None


class ModelledEnergy(Contract):
    """A simulated trial's modelled power (runner/telemetry/modelled.py, docs/simulator.md);
    never read for a measured result."""

    modelled: Literal[True]
    power_w: float
    power_w_per_accelerator: float
    idle_power_w_per_accelerator: float
    dynamic_energy_j: float
    accelerators: Positive
    window_s: float
    method: str


class SessionShare(Contract):
    """One tier's share of sessions that met it, with its session-bootstrap interval."""

    met: Count
    sessions: Count
    share: float | None  # None: no session in the window
    low: float | None
    high: float | None
    confidence: float


class WholeTaskTime(Contract):
    """Model time of whole trajectories (tool delays excluded), seconds: `sessions` ended,
    `censored` still running at the trial's end; median and p90 by Kaplan–Meier over both
    (None when too many were still running to tell; docs/metrics.md "Whole-task time")."""

    sessions: Count
    censored: Count = 0  # absent in trials recorded before censoring was counted
    median: float | None
    p90: float | None


class SessionMetrics(Contract):
    """A trial's session block (agentperf.engine.metrics.summarize_sessions)."""

    sessions: Count
    tiers: dict[str, SessionShare]
    whole_task_model_time_s: WholeTaskTime


class StatInterval(Contract):
    """One statistic's session-bootstrap interval as stored (agentperf.engine.stats
    ``Interval.to_dict()``, docs/verification.md "Statistics"): an infinite or undefined
    bound (failures) is null."""

    name: str
    estimate: float | None
    low: float | None
    high: float | None
    width: float | None
    confidence: float
    sessions: Count
    requests: Count
    resamples: Count


class MinRequests(Contract):
    """The requests a percentile needs for the stated confidence and margin
    (agentperf.engine.stats ``min_requests_table``), with MLPerf's normal approximation."""

    min_requests: Count
    mlperf_normal_approx: Count
    confidence: float
    margin: float


class TrialStatistics(Contract):
    """A trial's bootstrap statistics (agentperf/engine/trial.py ``judge_trial``,
    docs/verification.md "Statistics"): the intervals by statistic (``p25_output_speed``,
    ``ttft_p<N>``, ``throughput_per_accelerator``), the minimum requests by percentile
    (``p25``...) and the tiers whose verdict the intervals made marginal."""

    intervals: dict[str, StatInterval]
    min_requests: dict[str, MinRequests]
    marginal: list[str]


class TrialMetrics(Contract, TrialSummary):
    """``Trial.metrics``: the engine's TrialSummary (agentperf/engine/metrics.py, where its
    fields are declared), strict, with the extra sections below: the trial's bootstrap
    statistics, a sharded trial's load generator (docs/engine.md "Sharded trials"), the
    measured window power and a simulated trial's modelled power."""

    model_config = Contract.model_config

    # As stored (JSON): an infinite percentile (failures) is null
    ttft_s: dict[str, float | None]  # type: ignore[assignment]
    client: ClientHealth
    # None: a trial run without bootstrap resamples
    statistics: TrialStatistics | None = None
    # None: the trial ran in one load-generator process
    load_generator: LoadGenerator | None = None
    power_w: float | None = None  # measured over the window (TrialTelemetry.power_w)
    modelled_energy: ModelledEnergy | None = None
    # engine.metrics.summarize_sessions (docs/engine.md "Session SLOs"); None: a trial
    # stored before sessions were summarised
    sessions: SessionMetrics | None = None  # type: ignore[assignment]
    # engine.cachetruth (docs/metrics.md "Cache truth"), with the window's counters where
    # the worker scraped them; None: a trial stored before it was summarised
    cache_truth: CacheTruth | None = None

    @classmethod
    def of(cls, summary: TrialSummary, **extra: Any) -> TrialMetrics:
        """From the engine's own summary (and the extra sections, already JSON)."""
        return cls.model_validate({**summary.to_dict(), **extra})

    def interval(self, name: str) -> StatInterval | None:
        """The bootstrap interval of statistic ``name``; None where none was computed."""
        return self.statistics.intervals.get(name) if self.statistics is not None else None


class ServerMetrics(Contract):
    """The server's /metrics at the window's start and end (counters the worker keeps), or
    why a scrape failed (docs/verification.md)."""

    start: dict[str, float] | None = None
    end: dict[str, float] | None = None
    start_error: str | None = None
    end_error: str | None = None


class EngineMetrics(Contract):
    """The serving engine's own gauges and counters over a trial window, scraped from its
    /metrics through the run (docs/pipeline.md "Engine metrics"): each series is (seconds
    from the window's start, value); counters are cumulative from the server's start."""

    source: str = Field(max_length=100)
    # a floor rather than gt=0: OpenAPI 3.0's exclusiveMinimum is a flag, not a number
    interval_s: float = Field(ge=0.1, le=3600)
    counters: list[str] = Field(default_factory=list, max_length=20)
    series: dict[str, list[Annotated[list[float], Field(min_length=2, max_length=2)]]] = Field(
        max_length=20
    )
    failed_scrapes: Count = 0


class AcceleratorIdentity(Contract):
    """An accelerator in use over the window (runner/telemetry/power.py)."""

    index: Count
    name: str
    uuid: str | None


class AcceleratorEnergy(AcceleratorIdentity):
    """One accelerator's energy counter over the window, and its mean power."""

    energy_j: float
    power_w: float


class PowerCrossCheck(Contract):
    """The counters' power against the sampled power integrated over the same window."""

    integrated_power_w: float
    difference_pct: float


class TrialTelemetry(Contract):
    """``Trial.telemetry``: power and energy measured on the runner host over the window
    (runner/telemetry/power.py window_energy), or ``{"measured": false, "reason"}``; the
    server's /metrics scrapes ride along (docs/pipeline.md "The contract")."""

    measured: bool
    reason: str | None = None
    tool: str | None = None
    method: str | None = None
    denominator: str | None = None
    accelerators: Count | None = None
    accelerators_on_host: Count | None = None
    accelerators_used: list[AcceleratorIdentity] | None = None
    utilization_pct: float | None = None
    power_w: float | None = None
    energy_j: float | None = None
    coverage: float | None = None
    max_gap_s: float | None = None
    samples: Count | None = None
    per_accelerator: list[AcceleratorEnergy] | None = None
    cross_check: PowerCrossCheck | None = None
    server_metrics: ServerMetrics | None = None
    engine_metrics: EngineMetrics | None = None


_VERDICTS: TypeAdapter[dict[str, TierVerdict]] = TypeAdapter(dict[str, TierVerdict])


def trial_verdicts(stored: Any) -> dict[str, TierVerdict]:
    """``Trial.verdicts`` read back through the contract (raises on any other shape)."""
    return _VERDICTS.validate_python(stored)


def trial_metrics(stored: Any) -> TrialMetrics:
    """``Trial.metrics`` read back through the contract (raises on any other shape)."""
    return TrialMetrics.model_validate(stored)
