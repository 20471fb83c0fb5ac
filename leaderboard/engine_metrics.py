"""The serving engine's own metrics over the run, as the result page shows them
(docs/pipeline.md "Engine metrics").

Each measured trial may carry ``telemetry.engine_metrics`` (agentperf/contract.py
``EngineMetrics``): the server's gauges and counters scraped from its /metrics through the
window. The page shows, per trial, the prefix-cache hits over queries in the window (counter
differences), preemptions, and the peaks of running and waiting requests and KV-cache usage;
and a chart of those series over the window of the trial with the most agents.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from agentperf import contract

from .tables import Column, Table


def _engine_metrics(trial: Any) -> contract.EngineMetrics | None:
    telemetry = trial.window_telemetry if hasattr(trial, "window_telemetry") else None
    return telemetry.engine_metrics if telemetry is not None else None


def _delta(series: Sequence[Sequence[float]] | None) -> float | None:
    """A counter's increase over the window: last − first scrape (the first is the last one
    before the window); None when it went backwards (the server restarted)."""
    if not series or len(series) < 2:
        return None
    change = series[-1][1] - series[0][1]
    return change if change >= 0 else None


def _peak(series: Sequence[Sequence[float]] | None) -> float | None:
    inside = [v for t, v in series or () if t >= 0]
    return max(inside) if inside else None


def engine_metrics_rows(trials: Iterable[Any]) -> list[dict[str, Any]]:
    rows = []
    for trial in sorted(trials, key=lambda t: t.index):
        found = _engine_metrics(trial)
        if found is None:
            continue
        s = found.series
        hits, queries = _delta(s.get("prefix_cache_hits")), _delta(s.get("prefix_cache_queries"))
        rows.append(
            {
                "trial": trial.index + 1,
                "agents": trial.concurrency,
                "cache_hits": hits,
                "cache_queries": queries,
                "hit_rate": hits / queries if hits is not None and queries else None,
                "preemptions": _delta(s.get("preemptions")),
                "running_peak": _peak(s.get("running")),
                "waiting_peak": _peak(s.get("waiting")),
                "kv_peak": _peak(s.get("kv_cache_usage")),
                "scrapes": len(s.get("running") or next(iter(s.values()), [])),
                "failed": found.failed_scrapes,
            }
        )
    return rows


def engine_metrics_table(trials: Iterable[Any]) -> Table:
    columns = [
        Column("trial", "Trial", "int"),
        Column("agents", "Agents", "int"),
        Column("cache_queries", "Prefix-cache queries (tokens)", "int", "not reported"),
        Column("cache_hits", "Prefix-cache hits (tokens)", "int", "not reported"),
        Column("hit_rate", "Hit rate", "pct", "not reported"),
        Column("preemptions", "Preemptions", "int", "not reported"),
        Column("running_peak", "Running (peak)", "int", "not reported"),
        Column("waiting_peak", "Waiting (peak)", "int", "not reported"),
        Column("kv_peak", "KV-cache usage (peak)", "pct", "not reported"),
        Column("scrapes", "Scrapes", "int"),
    ]
    return Table(
        "engine-metrics",
        "The engine's own metrics in each trial window (its /metrics)",
        columns,
        engine_metrics_rows(trials),
    )


def engine_metrics_figure(trials: Iterable[Any]) -> dict[str, Any] | None:
    """Running and waiting requests, KV-cache usage and the prefix-cache hit rate between
    scrapes, over the window of the trial with the most agents that has them."""
    chosen = None
    for trial in sorted(trials, key=lambda t: (t.concurrency, t.index)):
        if _engine_metrics(trial) is not None:
            chosen = trial
    if chosen is None:
        return None
    found = _engine_metrics(chosen)
    assert found is not None
    s = found.series
    traces: list[dict[str, Any]] = []
    for name, label, dash in (("running", "running", "solid"), ("waiting", "waiting", "dot")):
        if s.get(name):
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "line": {"shape": "hv", "dash": dash},
                    "name": f"{label} requests",
                    "x": [t for t, _ in s[name]],
                    "y": [v for _, v in s[name]],
                }
            )
    if s.get("kv_cache_usage"):
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "KV-cache usage",
                "yaxis": "y2",
                "x": [t for t, _ in s["kv_cache_usage"]],
                "y": [v for _, v in s["kv_cache_usage"]],
            }
        )
    hits, queries = s.get("prefix_cache_hits") or [], s.get("prefix_cache_queries") or []
    if len(hits) == len(queries) and len(hits) > 1:
        xs, ys = [], []
        for (_, h0), (t1, h1), (_, q0), (_, q1) in zip(
            hits, hits[1:], queries, queries[1:], strict=False
        ):
            if q1 > q0 and h1 >= h0:
                xs.append(t1)
                ys.append((h1 - h0) / (q1 - q0))
        if xs:
            traces.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": "prefix-cache hit rate (between scrapes)",
                    "yaxis": "y2",
                    "x": xs,
                    "y": ys,
                }
            )
    if not traces:
        return None
    return {
        "data": traces,
        "layout": {
            "title": {"text": f"Trial {chosen.index + 1}: {chosen.concurrency} agents"},
            "xaxis": {"title": {"text": "seconds into the measurement window"}},
            "yaxis": {"title": {"text": "requests"}, "rangemode": "tozero"},
            "yaxis2": {
                "title": {"text": "share"},
                "overlaying": "y",
                "side": "right",
                "range": [0, 1.05],
                "tickformat": ".0%",
            },
            "legend": {"orientation": "h"},
            "margin": {"t": 40, "r": 60},
            "height": 320,
        },
    }
