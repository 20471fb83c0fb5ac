"""Plotly figures, built server-side from cached series data.

A series is plain data (so it caches): one published result and its trial points. The
figure is the frontier chart (docs/engine.md "Frontier and comparisons"): x = p25 output
speed per agent, y = total throughput per accelerator, one trace per result through its
points in concurrency order, tier speeds as vertical guides. Colours are the Okabe–Ito
palette (safe for the common colour-vision deficiencies), and marker shapes vary too so
colour is never the only cue.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
import plotly.graph_objects as go

from leaderboard.points import PublishedPoint, by_concurrency
from leaderboard.result_documents import TwinBand

# Okabe & Ito (2008), most distinct first; yellow last (low contrast on white).
OKABE_ITO = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]
SYMBOLS = ["circle", "square", "diamond", "triangle-up", "triangle-down", "x", "cross", "star"]
X_TITLE = "p25 output speed per agent (tok/s)"
HEIGHT = 560  # px: a frontier chart's default height
Y_TITLE = "Throughput per accelerator (input incl. cached + output, tok/s)"
HOVER = (
    "<b>%{fullData.name}</b><br>"
    "N=%{customdata[0]} agents<br>"
    "p25 speed %{x:.1f} tok/s<br>"
    "TTFT p75 %{customdata[1]}<br>"
    "throughput %{y:,.0f} tok/s/accel.<br>"
    "%{customdata[2]:.3f} agents/accel.<br>"
    "%{customdata[3]}"
    "<extra></extra>"
)


def compact_points(points: Sequence[PublishedPoint]) -> list[list]:
    """[N, p25 speed, throughput/accel., TTFT p75, agents/accel., TTFT text, [speed low,
    speed high, throughput low, throughput high]] per point, by concurrency (the hover text
    is formatted here once, not on every page build; a bound is None when not measured).
    ``points``: ``Result.published_points``."""
    return [
        [
            p.concurrency,
            p.p25_speed,
            p.throughput_per_accelerator,
            p.ttft_p75_s,
            p.agents_per_accelerator,
            _ttft_text(p.ttft_p75_s),
            [*p.interval("p25_speed"), *p.interval("throughput_per_accelerator")],
        ]
        for p in by_concurrency(points)
    ]


def _interval_text(bounds: list) -> str:
    sx0, sx1, ty0, ty1 = bounds
    parts = []
    if sx0 is not None and sx1 is not None:
        parts.append(f"95% CI speed {sx0:.1f}–{sx1:.1f}")
    if ty0 is not None and ty1 is not None:
        parts.append(f"throughput {ty0:,.0f}–{ty1:,.0f}")
    return ", ".join(parts) if parts else "no interval"


def _error_bars(values: list[float], bounds: list[tuple[float | None, float | None]]) -> dict:
    """An asymmetric Plotly error bar from (low, high) per point; no bar where not measured
    (a None in the arrays draws nothing)."""
    plus = [
        None if hi is None else max(0.0, hi - v) for v, (_, hi) in zip(values, bounds, strict=True)
    ]
    minus = [
        None if lo is None else max(0.0, v - lo) for v, (lo, _) in zip(values, bounds, strict=True)
    ]
    return {
        "type": "data",
        "symmetric": False,
        "array": plus,
        "arrayminus": minus,
        "visible": any(x is not None for x in plus),
        "thickness": 1,
        "width": 3,
    }


def result_series(
    result: Any,
    *,
    points: list[list] | None = None,
    name: str | None = None,
    band: TwinBand | None = None,
) -> dict:
    """Chart data of one Result (plain data, cacheable); `points` as compact_points gives;
    `band`: a simulated result's Result.band, drawn around its frontier (the result page)."""
    series = {
        "id": result.pk,
        "name": name or result.label,
        "model": result.model.name,
        "hardware": result.hardware.name,
        "is_simulated": result.is_simulated,
        # "quarantined" / "admitted" for a simulated result (docs/simulator.md "Accuracy")
        "twin": result.twin_status,
        "status": result.status,
        "points": points if points is not None else compact_points(result.published_points),
    }
    if band and result.is_simulated:
        series["band"] = band_curve(series["points"], band)
    return series


def step_at(points: list[list], speed: float) -> float | None:
    """The frontier's step at p25 ``speed``: the most throughput of a trial at least that
    fast; None outside the measured speeds (nothing is read past the trials)."""
    speeds = [p[1] for p in points]
    if not speeds or not min(speeds) <= speed <= max(speeds):
        return None
    return max(p[2] for p in points if p[1] >= speed)


def _ratio_at(ratios: list[tuple[float, float, float]], speed: float) -> tuple[float, float]:
    """The band's (low, high) ratio at ``speed``, linear between the band's own speeds."""
    for (s0, lo0, hi0), (s1, lo1, hi1) in zip(ratios, ratios[1:], strict=False):
        if s0 <= speed <= s1:
            f = 0.0 if s1 == s0 else (speed - s0) / (s1 - s0)
            return lo0 + f * (lo1 - lo0), hi0 + f * (hi1 - hi0)
    return ratios[0][1], ratios[0][2]


def band_curve(points: list[list], band: TwinBand) -> dict | None:
    """The band in this result's units: its stepped frontier (step_at) times the band's low
    and high ratios to the profile's nominal frontier (agentperf.simulator.bands), at the
    band's speeds and at every trial's speed between them, so that it steps with the line."""
    ratios = sorted((speed, lo, hi) for speed, lo, hi, _line in band.ratios)
    if len(ratios) < 2:
        return None
    first, last = ratios[0][0], ratios[-1][0]
    speeds = sorted({s for s, _, _ in ratios} | {p[1] for p in points if first <= p[1] <= last})
    xs, lows, highs = [], [], []
    for speed in speeds:
        y = step_at(points, speed)
        if y is None:
            continue
        lo, hi = _ratio_at(ratios, speed)
        xs.append(speed)
        lows.append(y * lo)
        highs.append(y * hi)
    if len(xs) < 2:
        return None
    return {
        "x": xs,
        "low": lows,
        "high": highs,
        "treatment": band.treatment,
        "open": [p.name for p in band.open_parameters],
    }


def _band_traces(index: int, s: dict) -> list[dict]:
    """A filled band around a simulated result's frontier: a lower edge, then an upper edge
    filled down to it (``tonexty``)."""
    b = s.get("band")
    if not b:
        return []
    colour = OKABE_ITO[index % len(OKABE_ITO)]
    r, g, bl = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    what = (
        "envelope over open parameters and fit"
        if b["treatment"] == "envelope"
        else ("fit uncertainty around the vendor-optimal choice")
    )
    # x ascends here, so "vh" is the frontier's step ("hv" along the trials' order)
    edge = {
        "type": "scatter",
        "mode": "lines",
        "line": {"width": 0, "color": colour, "shape": "vh"},
    }
    meta = {"result_id": s["id"], "band": True, "treatment": b["treatment"]}
    return [
        {
            **edge,
            "x": b["x"],
            "y": b["low"],
            "showlegend": False,
            "hoverinfo": "skip",
            "legendgroup": str(s["id"]),
            "meta": meta,
        },
        {
            **edge,
            "x": b["x"],
            "y": b["high"],
            "fill": "tonexty",
            "fillcolor": f"rgba({r},{g},{bl},0.18)",
            "name": f"{s['name']} band ({what})",
            "legendgroup": str(s["id"]),
            "hovertemplate": "band edge %{y:,.0f} tok/s/accel. at %{x:.0f} tok/s<extra></extra>",
            "meta": meta,
        },
    ]


def _ttft_text(value: float | None) -> str:
    return "failed requests (∞)" if value is None else f"{value:.2f} s"


@functools.lru_cache(maxsize=256)
def _trace_style(index: int, simulated: bool) -> dict:
    """A validated scatter trace without data: the look of the index-th series."""
    colour = OKABE_ITO[index % len(OKABE_ITO)]
    symbol = SYMBOLS[(index // len(OKABE_ITO) + index) % len(SYMBOLS)]
    trace = go.Scatter(
        mode="lines+markers",
        # Steps, never slopes: between two trials the deployment is only known to give the
        # faster trial's throughput down to the slower trial's speed ("hv": across at the
        # first point's throughput, then up at the second's speed). docs/engine.md
        # "Frontier and comparisons".
        line={
            "color": colour,
            "width": 2,
            "dash": "dot" if simulated else "solid",
            "shape": "hv",
        },
        marker={
            "color": colour,
            "size": 8,
            "symbol": f"{symbol}-open" if simulated and "-open" not in symbol else symbol,
        },
    )
    return trace.to_plotly_json()  # the hover text is the template's, once per figure


def _trace(index: int, s: dict) -> dict:
    # Per-series data goes into a copy of a validated style: validating 200 traces of 30
    # points through graph objects costs ~300 ms, the copy a few µs (benchmarks/site.py).
    sim = bool(s["is_simulated"])
    pts = s["points"]
    bounds = [p[6] if len(p) > 6 else [None] * 4 for p in pts]
    xs = [p[1] for p in pts]
    ys = [p[2] for p in pts]
    colour = _trace_style(index, sim)["marker"]["color"]
    return {
        **_trace_style(index, sim),
        "x": xs,
        "y": ys,
        "error_x": {**_error_bars(xs, [(b[0], b[1]) for b in bounds]), "color": colour},
        "error_y": {**_error_bars(ys, [(b[2], b[3]) for b in bounds]), "color": colour},
        "customdata": [
            [p[0], p[5], p[4] or 0.0, _interval_text(b)] for p, b in zip(pts, bounds, strict=True)
        ],
        "name": trace_name(s),
        "legendgroup": str(s["id"]),
        "meta": {"result_id": s["id"], "simulated": sim, "twin": s.get("twin")},
    }


def trace_name(s: dict) -> str:
    if not s["is_simulated"]:
        return str(s["name"])
    if s.get("twin") == "quarantined":
        return f"{s['name']} [simulated, quarantined twin]"
    return f"{s['name']} [simulated]"


def _reading_traces(readings: Sequence[dict]) -> list[dict]:
    """Iso-speed readings as open diamonds, one trace per kind of reading: those read
    between measured points say so in their legend entry and hover."""
    traces = []
    for how in sorted({r["read"] for r in readings}):
        mine = [r for r in readings if r["read"] == how]
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "x": [r["x"] for r in mine],
                "y": [r["y"] for r in mine],
                "text": [r["name"] for r in mine],
                "name": f"iso-speed reading ({how})",
                "marker": {"symbol": "diamond-open", "size": 12, "color": "#000"},
                "hovertemplate": f"%{{text}}: %{{y:,.0f}} tok/s/accel. at %{{x:g}} tok/s, {how}"
                "<extra></extra>",
                "meta": {"readings": True, "read": how},
            }
        )
    return traces


def _vline(speed: float, *, colour: str, width: int, dash: str) -> dict:
    return {
        "type": "line",
        "xref": "x",
        "yref": "paper",
        "x0": speed,
        "x1": speed,
        "y0": 0,
        "y1": 1,
        "line": {"color": colour, "width": width, "dash": dash},
    }


def frontier_layout(
    *,
    tiers: Iterable[tuple[str, float]] = (),
    log: bool = False,
    marker_speed: float | None = None,
    any_simulated: bool = False,
    title: str = "",
    height: int = HEIGHT,
) -> dict:
    shapes, annotations = [], []
    for name, speed in tiers:
        shapes.append(_vline(speed, colour="#777", width=1, dash="dash"))
        annotations.append(
            {
                "x": speed,
                "y": 1,
                "xref": "x",
                "yref": "paper",
                "text": name,
                "showarrow": False,
                "yanchor": "bottom",
                "font": {"size": 11, "color": "#444"},
            }
        )
    if marker_speed is not None:
        shapes.append(_vline(marker_speed, colour="#000", width=2, dash="solid"))
    if any_simulated:
        annotations.append(
            {
                "text": "Dotted lines, open markers: SIMULATED results (not measured hardware)",
                "xref": "paper",
                "yref": "paper",
                "x": 0,
                "y": 1.08,
                "showarrow": False,
                "xanchor": "left",
                "font": {"size": 12, "color": "#A0507A"},
            }
        )
    axis_type = "log" if log else "linear"
    layout = go.Layout(
        title={"text": title} if title else None,
        xaxis={"title": {"text": X_TITLE}, "type": axis_type, "zeroline": False},
        yaxis={"title": {"text": Y_TITLE}, "type": axis_type, "zeroline": False},
        hovermode="closest",
        legend={"orientation": "h", "y": -0.18},
        margin={"l": 70, "r": 20, "t": 50, "b": 60},
        shapes=shapes,
        annotations=annotations,
        height=height,
    )
    return {**layout.to_plotly_json(), "template": _template()}


def _template() -> dict:
    """plotly_white's page look (its layout's axes, background, font and hover label) without
    its per-trace-type defaults (7 KB of every figure's JSON, none of which changes how a
    scatter draws here), and the frontier traces' shared hover text (issue 35: a page's chart
    data sent once)."""
    axis = {
        "gridcolor": "#EBF0F8",
        "linecolor": "#EBF0F8",
        "ticks": "",
        "title": {"standoff": 15},
        "zerolinecolor": "#EBF0F8",
        "automargin": True,
        "zerolinewidth": 2,
    }
    return {
        "layout": {
            "xaxis": axis,
            "yaxis": axis,
            "paper_bgcolor": "white",
            "plot_bgcolor": "white",
            "font": {"color": "#2a3f5f"},
            "hoverlabel": {"align": "left"},
            "title": {"x": 0.05},
            "colorway": OKABE_ITO,
        },
        # every frontier trace's hover text, sent once instead of once per trace
        "data": {"scatter": [{"hovertemplate": HOVER}]},
    }


def frontier_figure(
    series: Sequence[dict],
    *,
    tiers: Iterable[tuple[str, float]] = (),
    log: bool = False,
    marker_speed: float | None = None,
    title: str = "",
    height: int = HEIGHT,
    readings: Sequence[dict] = (),
) -> dict:
    """The frontier chart as a Plotly figure dict ({"data": [...], "layout": {...}});
    `readings`: figures read off the frontiers ({x, y, name, read}, agentperf.engine.frontier
    read_at_speed), drawn as marked points apart from the measured ones."""
    bands = [t for i, s in enumerate(series) for t in _band_traces(i, s)]
    return {
        "data": [_trace(i, s) for i, s in enumerate(series)] + bands + _reading_traces(readings),
        "layout": frontier_layout(
            tiers=tiers,
            log=log,
            marker_speed=marker_speed,
            any_simulated=any(s["is_simulated"] for s in series),
            title=title,
            height=height,
        ),
    }


def figure_json(figure: dict) -> str:
    """JSON for a <script type="application/json"> block ("<" escaped: safe in HTML)."""
    return orjson.dumps(figure, option=orjson.OPT_SERIALIZE_NUMPY).decode().replace("<", "\\u003c")
