"""The closed and the open loop side by side (docs/engine.md "Arrival modes").

A run whose search options had ``arrival: open`` carries, beside its closed-loop search
(N agents held), the open-loop search over the same dataset (sessions arriving at a rate):
``run.summary.open_loop`` (agentperf/contract.py ``OpenLoopSummary``). The
result page and the compare page draw, per tier, the closed loop's max agents and its TTFT
distribution at that N against the open loop's max rate, the concurrent sessions that rate
produced (mean, peak) and its TTFT distribution.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from agentperf import contract
from runs.models import BenchmarkRun, Trial

from .tables import Column, Table

TTFT_KEYS = ("p50", "p75", "p90", "p99")


def open_loop(run: BenchmarkRun) -> contract.OpenLoopSummary | None:
    """The run's open-loop summary, from its search summary read through the contract
    (``run.summary``); None: no open loop."""
    return run.summary.open_loop if run.summary is not None else None


def _ttft_text(ttft: dict[str, Any] | None) -> str | None:
    if not ttft:
        return None
    parts = [f"{k} {float(ttft[k]):.2f}" for k in TTFT_KEYS if ttft.get(k) is not None]
    return " · ".join(parts) + " s" if parts else None


def closed_ttft(trials: Iterable[Trial], max_agents: int | None) -> dict[str, Any] | None:
    """The TTFT percentiles of the last trial at the closed loop's max agents (its metrics
    through the contract, ``Trial.summary``)."""
    if not max_agents:
        return None
    found = None
    for trial in trials:
        if trial.concurrency == max_agents:
            found = dict(trial.summary.ttft_s) if trial.metrics else None
    return found


def loops_rows(result: Any, trials: Sequence[Any], tier_names: Sequence[str]) -> list[dict]:
    summary = open_loop(result.run)
    if summary is None:
        return []
    rows = []
    for name in tier_names:
        tier = summary.tiers.get(name)
        max_agents = (result.max_agents or {}).get(name)
        rows.append(
            {
                "tier": name,
                "closed_max_agents": max_agents,
                "closed_ttft": _ttft_text(closed_ttft(trials, max_agents)),
                "closed_ttft_s": closed_ttft(trials, max_agents),
                "open_ttft_s": None if tier is None else tier.ttft_s,
                "open_max_rate": None if tier is None else tier.max_rate_per_min or None,
                "open_mean_sessions": None if tier is None else tier.mean_concurrent_sessions,
                "open_peak_sessions": None if tier is None else tier.peak_concurrent_sessions,
                "open_ttft": None if tier is None else _ttft_text(tier.ttft_s),
                "open_flags": None if tier is None else ", ".join(tier.flags) or None,
            }
        )
    return rows


def loops_table(result: Any, trials: Sequence[Any], tier_names: Sequence[str]) -> Table:
    """The result page's two loops; no rows when the run had no open loop."""
    columns = [
        Column("tier", "Tier"),
        Column("closed_max_agents", "Closed loop: max agents (N)", "int", "never passed"),
        Column("closed_ttft", "Closed loop: TTFT at N"),
        Column("open_max_rate", "Open loop: max rate (sessions/min)", "float1", "never passed"),
        Column("open_mean_sessions", "Open loop: mean concurrent sessions", "float1", "—"),
        Column("open_peak_sessions", "Open loop: peak concurrent sessions", "int", "—"),
        Column("open_ttft", "Open loop: TTFT at the max rate"),
        Column("open_flags", "Open-loop flags"),
    ]
    return Table(
        "loops",
        "Closed and open loop",
        columns,
        loops_rows(result, trials, tier_names),
        caption="Closed loop: N agents held, each starting its next turn when the last one "
        "ends (the ranked figure). Open loop: sessions arrive as a seeded Poisson process "
        "and leave after their task; the search finds the highest arrival rate that meets "
        "the tier, and the concurrent sessions it produced are measured over the window. "
        "Both replay the same dataset (methodology: docs/engine.md 'Arrival modes').",
    )


def compare_loops_table(results: Sequence[Any], tier_names: Sequence[str]) -> Table:
    """The compare page's two loops: per tier and result, closed N against the open loop's
    concurrency, with the TTFT distributions (rows only for results that have both)."""
    columns = [
        Column("tier", "Tier"),
        Column("result", "Result"),
        Column("closed_max_agents", "Closed: max agents (N)", "int", "never passed"),
        Column("closed_ttft", "Closed: TTFT at N"),
        Column("open_max_rate", "Open: max rate (sessions/min)", "float1", "never passed"),
        Column("open_mean_sessions", "Open: mean concurrent sessions", "float1", "—"),
        Column("open_peak_sessions", "Open: peak concurrent sessions", "int", "—"),
        Column("open_ttft", "Open: TTFT at the max rate"),
    ]
    rows = []
    # only the results whose run had an open loop: their trials in one query (the closed
    # loop's TTFT at N), none when no result has one
    with_open = [r for r in results if open_loop(r.run) is not None]
    trials: dict[int, list[Any]] = {r.run_id: [] for r in with_open}
    if with_open:
        for t in Trial.objects.filter(run_id__in=list(trials)).only(
            "run_id", "index", "concurrency", "metrics"
        ):
            trials[t.run_id].append(t)
    per_result = [
        (r, {row["tier"]: row for row in loops_rows(r, trials[r.run_id], tier_names)})
        for r in with_open
    ]
    for name in tier_names:
        for r, by_tier in per_result:
            row = by_tier.get(name)
            if row is not None:
                rows.append({**row, "result": r.display_label})
    return Table(
        "loops",
        "Closed and open loop",
        columns,
        rows,
        caption="For each result that ran the open loop beside the closed one: closed N "
        "against the open loop's rate and the concurrent sessions it produced, with the "
        "TTFT distribution of each at its maximum.",
    )


CLOSED_COLOUR = "#1f77b4"
OPEN_COLOUR = "#d62728"


def loops_figure(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The two loops drawn side by side (a Plotly figure dict; None without rows). Left:
    per tier, the closed loop's N against the open loop's mean concurrent sessions (a bar
    up to its peak). Right: the TTFT distribution (p50 to p99) of each loop at its maximum.
    Rows are ``loops_rows``'; a row's ``result`` (the compare page) names its result."""
    if not rows:
        return None
    labels = [f"{r['tier']}" + (f" · {r['result']}" if r.get("result") else "") for r in rows]
    data: list[dict[str, Any]] = [
        {
            "type": "bar",
            "name": "closed loop: N agents",
            "x": labels,
            "y": [r.get("closed_max_agents") for r in rows],
            "marker": {"color": CLOSED_COLOUR},
            "legendgroup": "closed",
        },
        {
            "type": "bar",
            "name": "open loop: mean concurrent sessions (bar to peak)",
            "x": labels,
            "y": [r.get("open_mean_sessions") for r in rows],
            "error_y": {
                "type": "data",
                "symmetric": False,
                "array": [
                    max(
                        0.0, (r.get("open_peak_sessions") or 0) - (r.get("open_mean_sessions") or 0)
                    )
                    for r in rows
                ],
                "arrayminus": [0.0 for _ in rows],
            },
            "marker": {"color": OPEN_COLOUR},
            "legendgroup": "open",
        },
    ]
    for label, row in zip(labels, rows, strict=True):
        for loop, colour, dash in (
            ("closed", CLOSED_COLOUR, "solid"),
            ("open", OPEN_COLOUR, "dash"),
        ):
            ttft = row.get(f"{loop}_ttft_s") or {}
            keys = [k for k in TTFT_KEYS if ttft.get(k) is not None]
            if not keys:
                continue
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": f"{label}: {loop} loop TTFT",
                    "x": keys,
                    "y": [float(ttft[k]) for k in keys],
                    "xaxis": "x2",
                    "yaxis": "y2",
                    "line": {"color": colour, "dash": dash},
                    "legendgroup": loop,
                    "showlegend": False,
                    "hovertemplate": f"{label}, {loop} loop<br>%{{x}}: %{{y:.2f}} s<extra></extra>",
                }
            )
    layout = {
        "barmode": "group",
        "height": 380,
        "margin": {"l": 60, "r": 20, "t": 30, "b": 60},
        "xaxis": {"domain": [0.0, 0.46], "title": {"text": "tier"}},
        "yaxis": {"title": {"text": "agents / sessions in progress"}, "rangemode": "tozero"},
        "xaxis2": {"domain": [0.56, 1.0], "anchor": "y2", "title": {"text": "TTFT percentile"}},
        "yaxis2": {"anchor": "x2", "title": {"text": "TTFT (s)"}, "rangemode": "tozero"},
        "legend": {"orientation": "h", "y": -0.25},
    }
    return {"data": data, "layout": layout}
