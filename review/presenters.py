"""Pure shaping of stored run data for the review pages (trial chart, search path, evidence).

Inputs are the JSON the runner stores (`Trial.metrics`, `Trial.verdicts`,
`BenchmarkRun.search_summary`, `VerificationReport.checks`), read through the contract
(agentperf/contract.py, docs/pipeline.md "The contract"), so these functions take the stored
dicts and are unit-tested alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentperf import contract
from agentperf.verification.status import STATUSES
from runs.models import CheckResult, Trial

PHASE_STYLE = {
    # Okabe–Ito colours (colour-blind safe), and a distinct symbol per phase.
    "ramp": ("#0072b2", "circle"),
    "bisect": ("#e69f00", "diamond"),
    "confirm": ("#009e73", "square"),
    "repeat": ("#cc79a7", "triangle-up"),
}
_OTHER_PHASE = ("#555555", "x")


@dataclass(slots=True)
class TrialRow:
    index: int
    concurrency: int
    phase: str
    p25_speed: float | None
    ttft: dict[str, float | None]  # "p75" -> seconds (None = infinite: failures)
    error_rate: float | None
    requests: int | None
    throughput_per_accelerator: float | None
    client_healthy: bool | None
    client_reason: str
    # [(tier name, True/False/None, reasons)]
    verdicts: list[tuple[str, bool | None, list[str]]] = field(default_factory=list)
    raw_url: str = ""

    @property
    def error_percent(self) -> float | None:
        return None if self.error_rate is None else self.error_rate * 100


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def trial_rows(
    trials: Iterable[Trial], tier_names: list[str], raw_urls: Mapping[int, str] | None = None
) -> list[TrialRow]:
    """One row per trial, in run order, with a verdict per tier (None when not judged) and
    the link to its raw records (``raw_urls`` by trial index) where there is one."""
    rows = []
    for t in sorted(trials, key=lambda t: t.index):
        metrics, verdicts = t.summary, t.tier_verdicts
        names = list(tier_names) + [n for n in verdicts if n not in tier_names]
        judged = [
            (name, v.passed, list(v.reasons)) if (v := verdicts.get(name)) else (name, None, [])
            for name in names
        ]
        rows.append(
            TrialRow(
                index=t.index,
                concurrency=t.concurrency,
                phase=t.phase or "",
                p25_speed=_num(metrics.p25_output_speed),
                ttft={k: _num(v) for k, v in metrics.ttft_s.items()},
                error_rate=_num(metrics.error_rate),
                requests=metrics.requests,
                throughput_per_accelerator=_num(metrics.throughput_per_accelerator),
                client_healthy=metrics.client.healthy,
                client_reason=metrics.client.reason,
                verdicts=judged,
                raw_url=(raw_urls or {}).get(t.index, ""),
            )
        )
    return rows


def tier_outcomes(
    summary: contract.SearchSummary | None, tiers: list[dict[str, Any]]
) -> list[dict]:
    """Per tier: its thresholds and the search's result (``run.summary``: max agents,
    confirmed, flags; none before the run completes)."""
    found = summary.tiers if summary is not None else {}
    out = []
    for tier in tiers:
        res = found.get(tier["name"])
        out.append(
            {
                **tier,
                "max_error_percent": (tier.get("max_error_rate") or 0) * 100,
                "max_agents": res.max_agents if res else None,
                "lowest_fail": res.lowest_fail if res else None,
                "confirmed": res.confirmed if res else None,
                "converged": res.converged if res else None,
                "flags": list(res.flags) if res else [],
            }
        )
    return out


def trial_chart(rows: list[TrialRow], tiers: list[dict[str, Any]]) -> dict[str, Any]:
    """A Plotly figure (as a JSON-ready dict): concurrency against p25 output speed (top) and
    TTFT at each tier percentile (bottom), markers by search phase, dotted tier lines."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=("p25 output speed per agent (tok/s)", "TTFT (s)"),
    )
    percentiles = sorted({int(t.get("ttft_percentile") or 75) for t in tiers} or {75})
    _speed_line(fig, rows)
    for phase in dict.fromkeys(r.phase for r in rows):
        _phase_markers(fig, phase, [r for r in rows if r.phase == phase], percentiles)
    _tier_lines(fig, tiers)
    fig.update_xaxes(type="log", dtick=math.log10(2), title_text="concurrency (agents)", row=2)
    fig.update_xaxes(type="log", dtick=math.log10(2), row=1)
    fig.update_yaxes(rangemode="tozero", row=1)
    fig.update_yaxes(rangemode="tozero", row=2)
    fig.update_layout(
        height=560,
        margin={"l": 60, "r": 20, "t": 40, "b": 50},
        legend={"orientation": "h", "y": 1.08, "x": 1, "xanchor": "right"},
        template="plotly_white",
        hovermode="closest",
    )
    return figure_data(fig)


def figure_data(fig: Any) -> dict[str, Any]:
    """A Plotly figure as plain JSON data (its own serialiser turns arrays into lists)."""
    return json.loads(fig.to_json())


def _speed_line(fig: Any, rows: list[TrialRow]) -> None:
    """The grey line through every trial's p25 speed, by concurrency (top panel)."""
    import plotly.graph_objects as go

    by_n = sorted(rows, key=lambda r: (r.concurrency, r.index))
    fig.add_trace(
        go.Scatter(
            x=[r.concurrency for r in by_n],
            y=[r.p25_speed for r in by_n],
            mode="lines",
            line={"color": "#bbbbbb", "width": 1},
            hoverinfo="skip",
            showlegend=False,
        ),
        row=1,
        col=1,
    )


def _phase_markers(fig: Any, phase: str, mine: list[TrialRow], percentiles: list[int]) -> None:
    """One search phase's trials: their p25 speed (top) and TTFT at each percentile
    (bottom), in the phase's colour and symbol."""
    import plotly.graph_objects as go

    color, symbol = PHASE_STYLE.get(phase, _OTHER_PHASE)
    name = phase or "trial"
    marker = {"color": color, "symbol": symbol, "size": 9}
    customdata = [[r.index] for r in mine]
    fig.add_trace(
        go.Scatter(
            x=[r.concurrency for r in mine],
            y=[r.p25_speed for r in mine],
            mode="markers",
            name=name,
            legendgroup=phase,
            marker=marker,
            customdata=customdata,
            hovertemplate="trial %{customdata[0]}<br>N=%{x}<br>p25 %{y:.1f} tok/s"
            "<extra>" + name + "</extra>",
        ),
        row=1,
        col=1,
    )
    for p in percentiles:
        key = f"p{p}"
        fig.add_trace(
            go.Scatter(
                x=[r.concurrency for r in mine],
                y=[r.ttft.get(key) for r in mine],
                mode="markers",
                name=f"{name} TTFT {key}",
                legendgroup=phase,
                showlegend=False,
                marker=marker,
                customdata=customdata,
                hovertemplate="trial %{customdata[0]}<br>N=%{x}<br>TTFT "
                + key
                + " %{y:.2f} s<extra>"
                + name
                + "</extra>",
            ),
            row=2,
            col=1,
        )


def _tier_lines(fig: Any, tiers: list[dict[str, Any]]) -> None:
    """Dotted lines: each tier's speed floor (top) and each distinct TTFT ceiling with the
    tiers that share it (bottom)."""
    for tier in tiers:
        fig.add_hline(
            y=tier["min_p25_output_speed"],
            line={"dash": "dot", "color": "#888888", "width": 1},
            annotation_text=f"{tier['name']}",
            annotation_position="top left",
            annotation_font_size=10,
            row=1,
            col=1,
        )
    for ceiling in dict.fromkeys(t["max_ttft_s"] for t in tiers):
        names = [t["name"] for t in tiers if t["max_ttft_s"] == ceiling]
        fig.add_hline(
            y=ceiling,
            line={"dash": "dot", "color": "#888888", "width": 1},
            annotation_text=f"≤ {ceiling:g} s ({', '.join(names)})",
            annotation_position="top left",
            annotation_font_size=10,
            row=2,
            col=1,
        )


def evidence_rows(evidence: Any, prefix: str = "") -> list[dict[str, Any]]:
    """Flatten a check's evidence into [{"key", "value", "block"}]: nested dicts become dotted
    keys, scalars and short scalar lists inline, anything else pretty JSON in a block."""
    rows: list[dict[str, Any]] = []
    if isinstance(evidence, dict):
        for key, value in evidence.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict) and value:
                rows.extend(evidence_rows(value, path))
            elif isinstance(value, dict):
                rows.append({"key": path, "value": "{}", "block": False})
            else:
                rows.append(_leaf(path, value))
        return rows
    return [_leaf(prefix or "value", evidence)]


def _leaf(path: str, value: Any) -> dict[str, Any]:
    scalar = (str, int, float, bool, type(None))
    if isinstance(value, scalar):
        return {"key": path, "value": _fmt(value), "block": False}
    if isinstance(value, list) and all(isinstance(v, scalar) for v in value) and len(value) <= 20:
        return {"key": path, "value": ", ".join(_fmt(v) for v in value) or "[]", "block": False}
    return {
        "key": path,
        "value": json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False),
        "block": True,
    }


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def check_counts(checks: Iterable[CheckResult]) -> dict[str, int]:
    """How many of a report's checks passed, warned and failed (another status is left out)."""
    counts = dict.fromkeys(STATUSES, 0)
    for check in checks:
        if check.status in counts:
            counts[check.status] += 1
    return counts


def suspicious_rows(config: Any) -> list[dict[str, Any]]:
    """The strings of a config the secret detector rated suspicious (below the refusal
    threshold), each with its path, the rules and its text in parts to highlight
    (docs/security.md "Secrets in configs"). A string at the refusal level (stored before a
    rule existed) is listed by path and rule with its text redacted: secrets never reach a
    page, not even a reviewer's."""
    from agentperf.schema.secrets import REFUSE, suspicious_strings
    from leaderboard.configview import REDACTED

    rows = []
    for row in suspicious_strings(config or {}):
        refused = row["severity"] == REFUSE
        rows.append(
            {
                "path": row["path"],
                "rules": row["rules"],
                "refused": refused,
                "parts": [(REDACTED, True)] if refused else row["parts"],
            }
        )
    return rows


def launch_rows(submission) -> dict[str, Any] | None:
    """The exact launch a reviewer approves (docs/security.md "Vendor commands"): its
    digest, whether an approval already covers it, and each part shown as stored, secrets
    by name only."""
    from runs.dispatch import launch_approval, launch_digest, launch_identity

    identity = launch_identity(submission)
    if identity is None:
        return None
    digest = launch_digest(identity)
    approval = launch_approval(submission, identity)

    from leaderboard.configview import redact

    def shown(item: Any) -> str:
        if isinstance(item, dict) and item.get("secret") is True:
            return f"<secret {item.get('name', '')}>".replace("< ", "<").strip()
        return str(item)

    # secrets never reach a page, not even a reviewer's: a clear one stored before the
    # detector existed is shown redacted (docs/security.md)
    argv = redact(identity["command"])
    env = redact(identity["env"])
    return {
        "digest": digest,
        "pool": identity["pool"],
        "argv": [shown(item) for item in argv],
        "env": [(name, shown(value)) for name, value in env.items()],
        "port": identity["port"],
        "kind": identity["kind"],
        "image": identity["image"] or "—",
        "approval": approval,
    }
