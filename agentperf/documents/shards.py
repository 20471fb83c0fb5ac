"""A sharded trial's documents (docs/engine.md "Sharded trials"): the report each
load-generator shard writes (agentperf/engine/sharding.py ``run_shard``), which a remote
shard posts beside its uploaded records, and the load-generator section the coordinator
merges from them into the trial's metrics (``merge_outputs``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from agentperf.documents.rules import Contract, Count, Positive

ShardIndex = Annotated[int, Field(ge=0, le=4095)]


class ShardHealth(Contract):
    """The shard's own client health over the window (None: not measured)."""

    loop_lag_p99_ms: float | None
    cpu_percent: float | None
    stamp_delay_p99_ms: float | None


class ClockOffset(Contract):
    """The shard's clock against the coordinator's (agentperf.engine.clocksync Offset):
    coordinator − shard, with the tightest round trip's uncertainty."""

    offset_ns: int
    uncertainty_ns: Count
    probes: Count


class ShardClock(Contract):
    """The clock offset measured before the trial's start and after its end."""

    start: ClockOffset
    end: ClockOffset


class ShardWindow(Contract):
    """The measurement window on the shard's own clock."""

    start_ns: int
    end_ns: int


class ShardRunReport(Contract):
    """What one shard reports once its agents finished (agentperf/engine/sharding.py
    ``_report``): its agents and records, where it ran, its health and its clock."""

    shard: ShardIndex
    shards: Positive
    agents: Count
    records: Count
    host: str
    boot_id: str | None  # same boot as the coordinator: the same monotonic clock
    pid: int
    cpus: list[int] | None  # the cores it was pinned to (None: no affinity on this OS)
    health: ShardHealth
    cpu_s: float
    peak_rss_mib: float
    clock: ShardClock
    window: ShardWindow


class ShardRow(Contract):
    """One shard of a sharded trial as merged (``merge_outputs``): its report's facts, the
    problems that made it unhealthy and the offset its records were shifted by."""

    shard: ShardIndex
    host: str | None
    agents: Count
    records: Count
    health: ShardHealth
    healthy: bool
    problems: list[str]
    cpu_s: float | None
    peak_rss_mib: float | None
    cpus: list[int] | None
    clock_offset_ns: int  # 0 on the coordinator's own clock (``same_clock``)
    clock_measured_offset_ns: int
    same_clock: bool
    clock_uncertainty_ns: Count
    clock_drift_ns: Count


class FailedAttempt(Contract):
    """An earlier attempt of the trial whose shards did not finish (agentperf/engine/jobs.py)."""

    attempt: Positive
    reason: str


class LoadGenerator(Contract):
    """``TrialMetrics.load_generator``: the shards a sharded trial ran on, each one's row,
    and whether every shard was healthy with its clock known to within a millisecond."""

    shards: Positive
    per_shard: list[ShardRow]
    max_clock_uncertainty_ns: Count
    healthy: bool
    reasons: list[str]
    # absent unless an attempt failed before this one
    failed_attempts: list[FailedAttempt] | None = None
