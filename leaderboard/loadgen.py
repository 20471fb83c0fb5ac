"""The load generator of a run, as a table: per sharded trial, each shard's agents,
records, host, health and clock offset (docs/engine.md "Sharded trials"). Shown on the
result page and the review console's run page; one-process trials give no rows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentperf import contract
from leaderboard.tables import Column, Table

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


def load_generator_rows(trials: Iterable[Any]) -> list[dict[str, Any]]:
    """One row per shard of every sharded trial (``Trial.metrics["load_generator"]``), from
    Trial rows or dicts with their keys."""
    rows = []
    for t in trials:
        row = (
            t
            if isinstance(t, dict)
            else {k: getattr(t, k) for k in ("index", "concurrency", "metrics")}
        )
        lg = contract.trial_metrics(row["metrics"]).load_generator or {}
        retried = len(lg.get("failed_attempts") or [])
        for p in lg.get("per_shard") or []:
            health = p.get("health") or {}
            status = (
                "healthy" if p.get("healthy") else "; ".join(p.get("problems") or ["unhealthy"])
            )
            if retried:
                status += f" (after {retried} failed attempt{'s' if retried > 1 else ''})"
            rows.append(
                {
                    "trial": row["index"],
                    "concurrency": row["concurrency"],
                    "shards": lg.get("shards"),
                    "shard": p.get("shard"),
                    "host": p.get("host"),
                    "agents": p.get("agents"),
                    "records": p.get("records"),
                    "cpu_percent": health.get("cpu_percent"),
                    "loop_lag_p99_ms": health.get("loop_lag_p99_ms"),
                    "stamp_delay_p99_ms": health.get("stamp_delay_p99_ms"),
                    "clock_offset_us": (p.get("clock_offset_ns") or 0) / 1e3,
                    "clock_uncertainty_us": (p.get("clock_uncertainty_ns") or 0) / 1e3,
                    "peak_rss_mib": p.get("peak_rss_mib"),
                    "status": status,
                    "_class": "" if p.get("healthy") else "unhealthy",
                }
            )
    return rows


def load_generator_table(trials: Iterable[Any]) -> Table:
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
