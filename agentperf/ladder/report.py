"""A ladder's figures and its self-contained HTML file (docs/engine.md "ladder").

``waterfall_figure`` (each change's gain at one speed, bars from the baseline's value to the
last rung's, with each gain's bootstrap interval as an error bar and a hatched bar for a gain
inside the noise), ``frontiers_figure`` (every rung's frontier overlaid) and
``ladder_table_html`` are plotly figure dicts and HTML the platform's ladder page reuses;
``ladder_html`` inlines plotly.js from the ``plotly`` package, so the file opens offline.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, TextIO

from agentperf.engine.report import CSS, _plot
from agentperf.ladder.attribute import AT_LEAST, AT_MOST

COLOURS = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#CC79A7",
    "#56B4E9",
    "#D55E00",
    "#F0E442",
    "#000000",
    "#999999",
)


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}"


def _iv(est: dict[str, Any] | None, digits: int = 0, pct: bool = False) -> str:
    if not est or est.get("estimate") is None:
        return "—"
    scale = 100.0 if pct else 1.0
    unit = " %" if pct else ""
    text = f"{est['estimate'] * scale:,.{digits}f}{unit}"
    if est.get("low") is not None and est.get("high") is not None:
        text += f" [{est['low'] * scale:,.{digits}f}, {est['high'] * scale:,.{digits}f}]"
    return text


@dataclass(frozen=True)
class _Reading:
    """What a waterfall reads off each rung of ladder.json: the throughput per accelerator
    at ``speed`` ("220"), or the single-agent speed (``speed == "single"``)."""

    speed: str

    @property
    def single(self) -> bool:
        return self.speed == "single"

    def value(self, r: dict[str, Any]) -> float | None:
        if self.single:
            v = r["single_agent_speed"].get("estimate")
        else:
            v = r["speeds"][self.speed]["throughput_per_accelerator"].get("estimate")
        return None if v is None else float(v)

    def gain(self, r: dict[str, Any]) -> dict[str, Any]:
        if self.single:
            return r["single_agent_speed"].get("gain") or {}
        return r["speeds"][self.speed].get("gain") or {}

    def floor(self, r: dict[str, Any]) -> bool:
        """The rung's figure is a floor: it never got this slow."""
        return not self.single and bool(r["speeds"][self.speed].get("floor"))


@dataclass
class _Bars:
    """The waterfall's bars: label, height, plotly measure and text of each."""

    x: list[str]
    y: list[float | None]
    measure: list[str]
    text: list[str] = field(default_factory=list)
    bounded: int = 0  # changes drawn without a bar: their gain is only a bound


def _waterfall_bars(rungs: list[dict[str, Any]], loo: bool, at: _Reading) -> _Bars:
    """The baseline's value, each change's gain, for leave-one-out the interaction
    remainder, and the last rung's value; a gain against a floor is a bound in words."""
    steps = rungs[2:] if loo else rungs[1:]
    top = rungs[1] if loo else rungs[-1]
    bars = _Bars(
        x=[f"{rungs[0]['name']} (baseline)"] + [r["change"] or r["name"] for r in steps],
        y=[at.value(rungs[0])] + [at.gain(r).get("estimate") for r in steps],
        measure=["absolute"] + ["relative"] * len(steps),
    )
    if loo:
        credited = sum(v for v in bars.y[1:] if v is not None)
        b, t = at.value(rungs[0]), at.value(top)
        bars.x.append("interaction (remainder)")
        bars.y.append(None if b is None or t is None else t - b - credited)
        bars.measure.append("relative")
    bars.x.append(f"= {top['name']}" + (" (all changes)" if not loo else ""))
    bars.y.append(at.value(top))
    bars.measure.append("total")
    bars.text = [_fmt(v) if not at.single else _fmt(v, 1) for v in bars.y]
    if at.floor(rungs[0]):
        bars.text[0] = "≥ " + bars.text[0] + " (floor)"
    if at.floor(top):
        bars.text[-1] = "≥ " + bars.text[-1] + " (floor)"
    for i, r in enumerate(steps, start=1):
        g = at.gain(r)
        if g.get("bound") is not None:  # a floor on either side: no bar, the bound in words
            bars.bounded += 1
            bars.text[i] = _bound_text(g["bound"])
        elif g.get("estimate") is not None and _noise(g):
            bars.text[i] += " (within noise)"
    if loo and bars.bounded:
        bars.y[len(steps) + 1] = None  # the remainder of credits that are not values
        bars.text[len(steps) + 1] = "—"
    if bars.bounded:
        # the last bar stands on its own value: the chain of bars does not add up to it
        bars.measure[-1] = "absolute"
    return bars


def _gain_intervals(rungs: list[dict[str, Any]], loo: bool, at: _Reading) -> dict[str, Any]:
    """Error bars at each change's bar top: the running total, ± the gain's interval."""
    ex, ey, up, down = [], [], [], []
    running = at.value(rungs[0]) or 0.0
    for r in rungs[2:] if loo else rungs[1:]:
        g = at.gain(r)
        est = g.get("estimate")
        if est is None:
            continue
        running += est
        if g.get("low") is None or g.get("high") is None:
            continue
        ex.append(r["change"] or r["name"])
        ey.append(running)
        up.append(max(0.0, g["high"] - est))
        down.append(max(0.0, est - g["low"]))
    return {
        "type": "scatter",
        "mode": "markers",
        "x": ex,
        "y": ey,
        "marker": {"color": "#222", "size": 5},
        "error_y": {
            "type": "data",
            "symmetric": False,
            "array": up,
            "arrayminus": down,
            "color": "#222",
            "thickness": 1.5,
            "width": 6,
        },
        "name": "95% interval of the gain",
        "hoverinfo": "skip",
    }


def _waterfall_heading(at: _Reading, title: str, bounded: int) -> str:
    heading = title or (
        "single-agent speed"
        if at.single
        else f"throughput per accelerator at {at.speed} tok/s per agent "
        "(read between measured trials; ≥: a floor)"
    )
    if bounded:
        heading += (
            f"<br><sub>{bounded} change{'s' if bounded > 1 else ''} drawn without a bar: a "
            "rung never got this slow, so its figure is a floor and the gain only a bound</sub>"
        )
    return heading


def waterfall_figure(order_doc: dict[str, Any], speed: str, *, title: str = "") -> dict[str, Any]:
    """The waterfall at ``speed`` ("220"; "single" for single-agent speed): the baseline's
    value, each change's gain (error bar: its interval), the last rung's value."""
    rungs = order_doc["rungs"]
    loo = order_doc.get("order") == "leave_one_out"
    at = _Reading(speed)
    bars = _waterfall_bars(rungs, loo, at)
    trace = {
        "type": "waterfall",
        "orientation": "v",
        "x": bars.x,
        "y": [0 if v is None else v for v in bars.y],
        "measure": bars.measure,
        "text": bars.text,
        "textposition": "outside",
        "connector": {"line": {"color": "#999", "width": 1}},
        "increasing": {"marker": {"color": "#009E73"}},
        "decreasing": {"marker": {"color": "#D55E00"}},
        "totals": {"marker": {"color": "#0072B2"}},
        "name": "gain",
    }
    unit = (
        "p25 output speed, one agent (tok/s)" if at.single else "throughput per accelerator (tok/s)"
    )
    return {
        "data": [trace, _gain_intervals(rungs, loo, at)],
        "layout": {
            "title": {"text": _waterfall_heading(at, title, bars.bounded)},
            "yaxis": {"title": {"text": unit}},
            "showlegend": False,
            "height": 480,
            "margin": {"t": 60, "b": 120},
        },
    }


def _bound_text(bound: dict[str, Any]) -> str:
    if bound.get("kind") == AT_LEAST and bound.get("value") is not None:
        return f"≥ {bound['value']:+,.0f} (vs a floor)"
    if bound.get("kind") == AT_MOST and bound.get("value") is not None:
        return f"≤ {bound['value']:+,.0f} (vs a floor)"
    return "not reached"


def _noise(g: dict[str, Any]) -> bool:
    lo, hi = g.get("low"), g.get("high")
    return lo is not None and hi is not None and lo <= 0 <= hi


def frontiers_figure(order_doc: dict[str, Any], speeds: list[float]) -> dict[str, Any]:
    """Every rung's measured trials (p25 speed, throughput per accelerator), one line each,
    stepping between trials as the site's frontier charts do (docs/engine.md "Frontier and
    comparisons")."""
    data = []
    for i, r in enumerate(order_doc["rungs"]):
        pts = sorted(r["trials"], key=lambda t: t["concurrency"])
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": f"{i}. {r['name']}",
                "x": [t["p25_output_speed"] for t in pts],
                "y": [t["throughput_per_accelerator"] for t in pts],
                "text": [f"N={t['concurrency']}" for t in pts],
                "line": {"color": COLOURS[i % len(COLOURS)], "shape": "hv"},
                "hovertemplate": "%{text}<br>p25 %{x:.1f} tok/s<br>%{y:,.0f} tok/s/accel."
                f"<extra>{html.escape(r['name'])}</extra>",
            }
        )
    shapes = [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": s,
            "x1": s,
            "y0": 0,
            "y1": 1,
            "line": {"color": "#777", "dash": "dot", "width": 1},
        }
        for s in speeds
    ]
    return {
        "data": data,
        "layout": {
            "xaxis": {"title": {"text": "p25 output speed per agent (tok/s)"}},
            "yaxis": {"title": {"text": "throughput per accelerator (tok/s)"}},
            "shapes": shapes,
            "height": 520,
            "margin": {"t": 30},
            "legend": {"orientation": "h", "y": -0.2},
        },
    }


def ladder_table_html(order_doc: dict[str, Any], speeds: list[str], tiers: list[str]) -> str:
    """One row per rung: single-agent speed, max agents per tier, throughput and the change's
    gain and share at each speed, server-measured acceptance and prefix-cache hit rate."""
    head = ["rung", "change", "single agent tok/s", "gain"]
    head += [f"max agents {html.escape(t)}" for t in tiers]
    for s in speeds:
        head += [f"tok/s/accel. @ {s}", f"gain @ {s}", f"share @ {s}"]
    head += ["spec. acceptance", "prefix-cache hits"]
    rows = ["<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for r in order_doc["rungs"]:
        sa = r["single_agent_speed"]
        cells = [
            f"{r['index']}. {html.escape(r['name'])}" + (" (reused)" if r.get("reused") else ""),
            html.escape(r.get("description") or ""),
            _iv(sa, 1),
            _iv(sa.get("gain"), 1),
        ]
        for t in tiers:
            m = r["max_agents"].get(t) or {}
            fail = m.get("lowest_fail")
            cells.append(f"{m.get('max_agents', 0):,}" + (f" (&lt;{fail:,})" if fail else ""))
        for s in speeds:
            row = r["speeds"][s]
            thr = _iv(row["throughput_per_accelerator"])
            if row.get("floor"):
                thr = "≥ " + thr
            gain = _iv(row.get("gain"))
            if (row.get("gain") or {}).get("bound"):  # against a floor: a bound, no value
                gain = _bound_text(row["gain"]["bound"])
            if row.get("within_noise"):
                gain += " <em>within noise</em>"
            share = _iv(row.get("share"), 1, pct=True)
            band = row.get("share_band")
            if band and band.get("low") is not None:  # docs/simulator.md "Bands"
                share += f" band {band['low']:.1%} … {band['high']:.1%}"
            if row.get("not_distinguishable"):
                share += " <em>not distinguishable</em>"
            cells += [thr, gain, share]
        sm = r["server_metrics"]
        acc, hit = sm.get("spec_acceptance"), sm.get("prefix_cache_hit_rate")
        cells += [
            "—" if acc is None else f"{acc:.1%}",
            "—" if hit is None else f"{hit:.1%}",
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return '<table class="ladder">' + "".join(rows) + "</table>"


ORDER_TITLES = {
    "forward": "Changes in the submitted order",
    "reverse": "Changes in reverse order",
    "leave_one_out": "Leave one out (each change: all changes minus all but it)",
}


def ladder_html(doc: dict[str, Any]) -> str:
    """The ladder's self-contained HTML: per order, a waterfall per evaluated speed and for
    single-agent speed, the rungs' frontiers overlaid, and the table."""
    from plotly.offline import get_plotlyjs

    title = f"Ladder: {doc['name']}"
    speeds = [f"{s['speed']:g}" for s in doc["speeds"]]
    tiers = [t["name"] for t in doc.get("tiers") or []]
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{html.escape(doc.get('description') or '')}</p>",
        '<p class="sim"><strong>Simulated</strong> (virtual time): the twin\'s prediction, '
        "not measured hardware.</p>"
        if doc.get("simulated")
        else "",
        f'<p class="note"><strong>{html.escape(doc["order_note"])}</strong></p>',
        '<p class="note">Throughput at a speed: linear on the rung\'s frontier (trials within '
        "the TTFT and error limits of the tier the speed falls in); ≥ marks a floor (the rung "
        "never got that slow). Intervals: 95% bootstrap by agent session.</p>",
    ]
    if doc.get("overlapping_changes"):
        pairs = "; ".join(
            f"{' & '.join(p['changes'])}: {', '.join(p['paths'])}"
            for p in doc["overlapping_changes"]
        )
        parts.append(f'<p class="note">Changes touching the same fields: {html.escape(pairs)}</p>')
    for order, od in doc["orders"].items():
        parts.append(f"<h2>{html.escape(ORDER_TITLES.get(order, order))}</h2>")
        parts.append(_plot(f"wf-{order}-single", waterfall_figure(od, "single")))
        for s in speeds:
            parts.append(_plot(f"wf-{order}-{s}", waterfall_figure(od, s)))
        parts.append(_plot(f"fr-{order}", frontiers_figure(od, [float(s) for s in speeds])))
        parts.append(ladder_table_html(od, speeds, tiers))
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{html.escape(title)}</title><style>{CSS}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>{''.join(parts)}</body></html>"
    )


def print_summary(doc: dict[str, Any], out: TextIO) -> None:
    """Per order and speed, each change's gain and share (plain text)."""
    for order, od in doc["orders"].items():
        out.write(f"\n{ORDER_TITLES.get(order, order)}\n")
        for r in od["rungs"]:
            sa = r["single_agent_speed"]
            out.write(f"  {r['index']}. {r['name']}: single agent {_iv(sa, 1)} tok/s")
            if sa.get("gain"):
                out.write(f" (gain {_iv(sa['gain'], 1)})")
            out.write("\n")
            for s, row in r["speeds"].items():
                if "gain" not in row:
                    floor = "≥ " if row.get("floor") else ""
                    out.write(f"     @{s}: {floor}{_iv(row['throughput_per_accelerator'])}\n")
                    continue
                noise = " within noise" if row.get("within_noise") else ""
                if row.get("not_distinguishable"):
                    noise += " not distinguishable (band holds 0)"
                floor = "≥ " if row.get("floor") else ""
                out.write(
                    f"     @{s}: {floor}{_iv(row['throughput_per_accelerator'])}  gain "
                    f"{_iv(row['gain'])}  share {_iv(row['share'], 1, pct=True)}{noise}\n"
                )
