"""The load generator of a run, as a table: per sharded trial, each shard's agents,
records, host, health and clock offset (docs/engine.md "Sharded trials"). Shown on the
result page and the review console's run page; one-process trials give no rows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentperf import contract
from leaderboard.tables import Column, Table
from runs.models import Trial

COLUMNS = [
    Column("trial", "Trial", "int"),
    Column("concurrency", "N", "int"),
    Column("shards", "Shards", "int"),
    Column("shard", "Shard", "int"),
    Column("host", "Host"),
    Column("agents", "Agents", "int"),
    Column("records", "Records", "int"),
    Column("cpu_percent", "CPU (%)", "float0", "not measured"),
    Column("loop_lag_p99_ms", "Loop lag p99 (ms)", "float2", "not measured"),
    Column("stamp_delay_p99_ms", "First-token stamping delay p99 (ms)", "float2", "not measured"),
    Column("clock_offset_us", "Clock offset (µs)", "float1"),
    Column("clock_uncertainty_us", "± (µs)", "float1"),
    Column("peak_rss_mib", "Peak memory (MiB)", "float0", "—"),
    Column("status", "Status"),
]


def _shard_status(shard: contract.ShardRow, retried: int) -> str:
    status = "healthy" if shard.healthy else "; ".join(shard.problems or ["unhealthy"])
    if retried:
        status += f" (after {retried} failed attempt{'s' if retried > 1 else ''})"
    return status


def load_generator_rows(trials: Iterable[Trial]) -> list[dict[str, Any]]:
    """One row per shard of every sharded trial (``TrialMetrics.load_generator``)."""
    rows = []
    for t in trials:
        index, concurrency = t.index, t.concurrency
        lg = t.summary.load_generator
        if lg is None:
            continue
        retried = len(lg.failed_attempts or [])
        for shard in lg.per_shard:
            rows.append(
                {
                    "trial": index,
                    "concurrency": concurrency,
                    "shards": lg.shards,
                    "shard": shard.shard,
                    "host": shard.host,
                    "agents": shard.agents,
                    "records": shard.records,
                    "cpu_percent": shard.health.cpu_percent,
                    "loop_lag_p99_ms": shard.health.loop_lag_p99_ms,
                    "stamp_delay_p99_ms": shard.health.stamp_delay_p99_ms,
                    "clock_offset_us": shard.clock_offset_ns / 1e3,
                    "clock_uncertainty_us": shard.clock_uncertainty_ns / 1e3,
                    "peak_rss_mib": shard.peak_rss_mib,
                    "status": _shard_status(shard, retried),
                    "_class": "" if shard.healthy else "unhealthy",
                }
            )
    return rows


def load_generator_table(trials: Iterable[Trial]) -> Table:
    rows = load_generator_rows(trials)
    caption = (
        "Each trial's agents ran in one load-generator process."
        if not rows
        else "Sharded trials: the agents ran in several load-generator processes or hosts, "
        "started together; their raw records were merged before one summary. A shard's "
        "clock offset is measured to the coordinator (tightest round trip); 0 on the "
        "coordinator's own host, which shares its clock."
    )
    return Table("load_generator", "Load generator", COLUMNS, rows, caption=caption)
