"""``python -m agentperf.engine report DIR``: one self-contained HTML file from a search's (or a
single trial's) output folder — see docs/engine.md "report".

Reads DIR/search.json and each trial's trial.json and requests.jsonl (or DIR/trial.json for
one trial) and writes DIR/report.html with the frontier (error bars: the trials' session-
bootstrap intervals), tier speed lines, the per-trial table, TTFT and output-speed
distributions, the search path, and max agents per tier. plotly.js is inlined from the
``plotly`` Python package, so the file opens offline and fetches nothing.

Distributions are drawn from quantiles computed here (p5, p25, p50, p75, p95 per trial over
the requests sent in the window), not from every request, so a trial of 100k requests adds
a few numbers to the file, not 100k. ``max_agents_table`` is the rich table ``search``
prints at its end.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from agentperf.engine import rawrecords
from agentperf.engine.metrics import percentile
from agentperf.engine.reasons import ErrorReason

if TYPE_CHECKING:  # rich is imported where a table is printed
    from rich.console import JustifyMethod

QUANTILES = (5, 25, 50, 75, 95)
PHASE_COLOURS = {"ramp": "#0072B2", "bisect": "#E69F00", "confirm": "#009E73", "repeat": "#CC79A7"}


class ReportError(Exception):
    """DIR is not an engine output folder (no search.json or trial.json)."""


@dataclass(slots=True)
class TrialView:
    """One trial as the report shows it."""

    index: int
    concurrency: int
    phase: str
    summary: dict[str, Any]
    verdicts: dict[str, Any]
    intervals: dict[str, Any]
    speed_q: list[float | None] = field(default_factory=list)
    ttft_q: list[float | None] = field(default_factory=list)
    ttft_failed: int = 0


def _read_json(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise ReportError(f"{path} is missing") from None
    except orjson.JSONDecodeError as exc:
        raise ReportError(f"{path}: not JSON ({exc})") from None


def _quantiles(values: Sequence[float]) -> list[float | None]:
    finite = [v for v in values if math.isfinite(v)]
    return [percentile(finite, q) if finite else None for q in QUANTILES]


def _distributions(path: Path, view: TrialView) -> None:
    """Speed and TTFT quantiles over the window's requests, streamed line by line."""
    if not path.exists():
        return
    w0 = view.summary.get("window_start_ns")
    w1 = view.summary.get("window_end_ns")
    speeds: list[float] = []
    ttfts: list[float] = []
    for r in rawrecords.iter_file(path):
        if w0 is not None and w1 is not None and not w0 <= r.t_send_ns < w1:
            continue
        s = r.output_speed
        if s is not None:
            speeds.append(s)
        t = r.ttft_s
        if math.isinf(t):
            view.ttft_failed += 1
        else:
            ttfts.append(t)
    view.speed_q = _quantiles(speeds)
    view.ttft_q = _quantiles(ttfts)


def _view(doc: dict[str, Any], folder: Path, *, index: int, phase: str) -> TrialView:
    view = TrialView(
        index=index,
        concurrency=int(doc.get("concurrency") or doc.get("config", {}).get("concurrency") or 0),
        phase=phase,
        summary=doc.get("summary") or {},
        verdicts=doc.get("verdicts") or {},
        intervals=(doc.get("statistics") or {}).get("intervals") or {},
    )
    _distributions(folder / "requests.jsonl", view)
    return view


def load(out_dir: str | os.PathLike[str]) -> tuple[dict[str, Any], list[TrialView]]:
    """(search document or {}, trials) from an engine output folder."""
    folder = Path(out_dir)
    if (folder / "search.json").exists():
        search = _read_json(folder / "search.json")
        views = []
        for t in search.get("trials") or []:
            data = t.get("data") or {}
            tdir = Path(data["dir"]) if data.get("dir") else None
            if tdir is not None and not tdir.is_absolute() and not tdir.exists():
                tdir = folder / tdir
            doc = (
                data
                if tdir is None or not (tdir / "trial.json").exists()
                else (_read_json(tdir / "trial.json"))
            )
            views.append(
                _view(doc, tdir or folder, index=int(t["index"]), phase=str(t.get("phase", "")))
            )
        return search, views
    if (folder / "trial.json").exists():
        doc = _read_json(folder / "trial.json")
        return {}, [_view(doc, folder, index=0, phase="trial")]
    raise ReportError(f"{folder} has neither search.json nor trial.json (run search or trial)")


def _passed(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, dict) and isinstance(v.get("passed"), bool):
        return bool(v["passed"])
    return None


def _bar(value: Any, interval: dict[str, Any] | None) -> tuple[float | None, float | None]:
    if not isinstance(value, int | float) or not interval:
        return None, None
    lo, hi = interval.get("low"), interval.get("high")
    if lo is None or hi is None:
        return None, None
    return max(0.0, hi - value), max(0.0, value - lo)


def frontier_figure(views: list[TrialView], tiers: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(views, key=lambda v: (v.concurrency, v.index))
    xs = [v.summary.get("p25_output_speed") for v in ordered]
    ys = [v.summary.get("throughput_per_accelerator") for v in ordered]
    ex = [_bar(x, v.intervals.get("p25_output_speed")) for x, v in zip(xs, ordered, strict=True)]
    ey = [
        _bar(y, v.intervals.get("throughput_per_accelerator"))
        for y, v in zip(ys, ordered, strict=True)
    ]
    trace = {
        "type": "scatter",
        "mode": "lines+markers+text",
        "name": "trials",
        "x": xs,
        "y": ys,
        "text": [f"N={v.concurrency}" for v in ordered],
        "textposition": "top right",
        "marker": {"color": "#0072B2", "size": 8},
        "line": {"color": "#0072B2"},
        "error_x": {
            "type": "data",
            "symmetric": False,
            "array": [e[0] for e in ex],
            "arrayminus": [e[1] for e in ex],
            "color": "#0072B2",
            "thickness": 1,
        },
        "error_y": {
            "type": "data",
            "symmetric": False,
            "array": [e[0] for e in ey],
            "arrayminus": [e[1] for e in ey],
            "color": "#0072B2",
            "thickness": 1,
        },
        "hovertemplate": "N=%{text}<br>p25 speed %{x:.1f} tok/s<br>%{y:,.0f} tok/s/accel."
        "<extra>trial</extra>",
    }
    shapes, notes = [], []
    for t in tiers:
        speed = t.get("min_p25_output_speed")
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": speed,
                "x1": speed,
                "y0": 0,
                "y1": 1,
                "line": {"color": "#777", "dash": "dash", "width": 1},
            }
        )
        notes.append(
            {
                "x": speed,
                "y": 1,
                "xref": "x",
                "yref": "paper",
                "text": t.get("name"),
                "showarrow": False,
                "yanchor": "bottom",
            }
        )
    return {
        "data": [trace],
        "layout": {
            "xaxis": {"title": {"text": "p25 output speed per agent (tok/s)"}},
            "yaxis": {"title": {"text": "throughput per accelerator (tok/s)"}},
            "shapes": shapes,
            "annotations": notes,
            "height": 520,
            "margin": {"t": 40},
            "hovermode": "closest",
        },
    }


def _box(views: list[TrialView], attr: str, title: str, unit: str) -> dict[str, Any]:
    shown = [v for v in views if getattr(v, attr) and getattr(v, attr)[2] is not None]
    qs = [getattr(v, attr) for v in shown]
    trace = {
        "type": "box",
        "name": title,
        "x": [f"#{v.index} N={v.concurrency}" for v in shown],
        "lowerfence": [q[0] for q in qs],
        "q1": [q[1] for q in qs],
        "median": [q[2] for q in qs],
        "q3": [q[3] for q in qs],
        "upperfence": [q[4] for q in qs],
        "marker": {"color": "#D55E00"},
        "hoverinfo": "all",
    }
    return {
        "data": [trace],
        "layout": {
            "yaxis": {"title": {"text": f"{title} ({unit})"}},
            "xaxis": {"title": {"text": "trial"}, "type": "category"},
            "height": 380,
            "margin": {"t": 30},
        },
    }


def search_path_figure(views: list[TrialView], tiers_result: dict[str, Any]) -> dict[str, Any]:
    ordered = sorted(views, key=lambda v: v.index)
    traces: list[dict[str, Any]] = []
    for phase, colour in PHASE_COLOURS.items():
        mine = [v for v in ordered if v.phase == phase]
        if not mine:
            continue
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": phase,
                "x": [v.index for v in mine],
                "y": [v.concurrency for v in mine],
                "marker": {"color": colour, "size": 10},
            }
        )
    traces.insert(
        0,
        {
            "type": "scatter",
            "mode": "lines",
            "name": "order",
            "showlegend": False,
            "x": [v.index for v in ordered],
            "y": [v.concurrency for v in ordered],
            "line": {"color": "#bbb"},
        },
    )
    shapes = [
        {
            "type": "line",
            "xref": "paper",
            "x0": 0,
            "x1": 1,
            "y0": t.get("max_agents"),
            "y1": t.get("max_agents"),
            "line": {"color": "#009E73", "dash": "dot", "width": 1},
        }
        for t in tiers_result.values()
        if t.get("max_agents")
    ]
    return {
        "data": traces,
        "layout": {
            "xaxis": {"title": {"text": "trial index"}, "dtick": 1},
            "yaxis": {"title": {"text": "concurrency N"}, "type": "log"},
            "shapes": shapes,
            "height": 360,
            "margin": {"t": 30},
        },
    }


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _ci(interval: dict[str, Any] | None, digits: int) -> str:
    if not interval or interval.get("low") is None or interval.get("high") is None:
        return ""
    return f" [{_fmt(interval['low'], digits)}–{_fmt(interval['high'], digits)}]"


def trials_table_html(views: list[TrialView], tier_names: list[str]) -> str:
    head = [
        "#",
        "phase",
        "N",
        "p25 speed tok/s [95% CI]",
        "TTFT p75 s",
        "throughput / accel. tok/s [95% CI]",
        "errors",
        "requests",
    ] + tier_names
    rows = []
    for v in sorted(views, key=lambda v: v.index):
        s = v.summary
        ttft = (s.get("ttft_s") or {}).get("p75")
        cells = [
            _fmt(v.index),
            v.phase,
            _fmt(v.concurrency),
            _fmt(s.get("p25_output_speed")) + _ci(v.intervals.get("p25_output_speed"), 1),
            "∞" if ttft is None and s else _fmt(ttft, 3),
            _fmt(s.get("throughput_per_accelerator"), 0)
            + _ci(v.intervals.get("throughput_per_accelerator"), 0),
            f"{float(s.get('error_rate') or 0):.1%}",
            _fmt(s.get("requests")),
        ]
        for name in tier_names:
            raw = v.verdicts.get(name)
            passed = _passed(raw)
            mark = "—" if passed is None else ("pass" if passed else "fail")
            if isinstance(raw, dict) and raw.get("marginal"):
                mark += " (marginal)"
            cells.append(mark)
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return (
        f'<table id="trials"><thead><tr>{header}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def error_reasons_html(views: list[TrialView]) -> str:
    """Per trial with failed requests: its top error reasons with counts and one detail as
    it came (docs/engine.md "Error reasons"); "" when no request failed."""
    rows = []
    for v in sorted(views, key=lambda v: v.index):
        reasons = [ErrorReason.model_validate(r) for r in v.summary.get("error_reasons") or []]
        failed = int(v.summary.get("failed") or 0)
        other = failed - sum(r.count for r in reasons)
        cells = [(r.count, r.error_class, r.example) for r in reasons]
        if other > 0:
            cells.append((other, "", "other reasons"))
        for count, error_class, example in cells:
            row = (_fmt(v.index), _fmt(v.concurrency), _fmt(count), error_class)
            tds = "".join(f"<td>{html.escape(c)}</td>" for c in row)
            rows.append(f'<tr>{tds}<td class="reason">{html.escape(example)}</td></tr>')
    if not rows:
        return ""
    header = "".join(f"<th>{h}</th>" for h in ("#", "N", "failed", "class", "reason (one example)"))
    return (
        f'<table id="error-reasons"><thead><tr>{header}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _error_reasons_section(views: list[TrialView]) -> list[str]:
    table = error_reasons_html(views)
    if not table:
        return []
    return [
        "<h2>Error reasons</h2>",
        '<p class="note">The most frequent reasons of each trial\'s failed requests (sent in '
        "the window); details that differ only in their numbers are one reason.</p>",
        table,
    ]


def tier_rows(search: dict[str, Any]) -> list[dict[str, Any]]:
    """Per tier: name, max agents, lowest fail, confirmed, flags (from search.json)."""
    out = []
    for name, t in (search.get("tiers") or {}).items():
        out.append(
            {
                "name": name,
                "max_agents": t.get("max_agents", 0),
                "lowest_fail": t.get("lowest_fail"),
                "confirmed": bool(t.get("confirmed")),
                "flags": list(t.get("flags") or []),
            }
        )
    return out


def tiers_table_html(search: dict[str, Any]) -> str:
    rows = []
    for t in tier_rows(search):
        cells = [
            t["name"],
            _fmt(t["max_agents"]),
            "no fail" if t["lowest_fail"] is None else _fmt(t["lowest_fail"]),
            "yes" if t["confirmed"] else "no",
            ", ".join(t["flags"]) or "—",
        ]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>"
        for h in ("tier", "max agents (highest pass)", "lowest fail", "confirmed", "flags")
    )
    return f'<table id="tiers"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def open_loop_html(search: dict[str, Any]) -> str:
    """Per tier of an open-loop search (docs/engine.md "Arrival modes"): the highest rate
    that met it, the concurrent sessions it produced and the TTFT there."""
    block = search.get("arrival") or {}
    rows = []
    for name, t in (block.get("tiers") or {}).items():
        ttft = t.get("ttft_s") or {}
        cells = [
            name,
            f"{t.get('max_rate_per_min', 0):g}/min",
            "no fail"
            if t.get("lowest_fail_rate_per_min") is None
            else f"{t['lowest_fail_rate_per_min']:g}/min",
            "—"
            if t.get("mean_concurrent_sessions") is None
            else _fmt(t["mean_concurrent_sessions"]),
            "—"
            if t.get("peak_concurrent_sessions") is None
            else _fmt(t["peak_concurrent_sessions"]),
            " · ".join(f"{k} {v:.2f} s" for k, v in ttft.items() if v is not None) or "—",
            ", ".join(t.get("flags") or []) or "—",
        ]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "tier",
            "max rate (sessions/min)",
            "lowest fail",
            "mean concurrent sessions",
            "peak concurrent sessions",
            "TTFT at the max rate",
            "flags",
        )
    )
    note = (
        f'<p class="note">Sessions arrived as a seeded Poisson process; one search step is '
        f"{block.get('rate_step_per_min', 0):g} sessions/min (the trials' N below are steps).</p>"
    )
    return note + (
        f'<table id="open-loop"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _plot(div: str, figure: dict[str, Any]) -> str:
    data = orjson.dumps(figure).decode().replace("<", "\\u003c")
    return (
        f'<div id="{div}" class="plot"></div><script>Plotly.newPlot("{div}", '
        f"{data}.data, {data}.layout, {{displaylogo: false, responsive: true}});</script>"
    )


CSS = """body{font-family:system-ui,sans-serif;margin:1.5rem auto;max-width:1200px;padding:0 1rem;
color:#222}table{border-collapse:collapse;margin:.5rem 0 1.5rem;font-size:.9rem}
td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child,td.reason{text-align:left}.note{color:#555}.sim{color:#A0507A}"""


def render(search: dict[str, Any], views: list[TrialView], *, title: str) -> str:
    """The report's HTML, plotly.js inlined."""
    from plotly.offline import get_plotlyjs

    tiers = list(search.get("tier_definitions") or [])
    tier_names = [t["name"] for t in tiers] or sorted({k for v in views for k in v.verdicts})
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        '<p class="sim"><strong>Simulated</strong> (virtual time): not measured hardware.</p>'
        if search.get("simulated")
        else "",
        f'<p class="note">{len(views)} trial{"s" if len(views) != 1 else ""}'
        + (
            f"; dataset {html.escape(str((search.get('dataset') or {}).get('name')))}"
            if search.get("dataset")
            else ""
        )
        + (
            f"; search flags: {html.escape(', '.join(search['flags']))}"
            if search.get("flags")
            else ""
        )
        + "</p>",
    ]
    if search.get("arrival"):  # an open-loop search: its points are rate steps
        parts += ["<h2>Open loop: max arrival rate per tier</h2>", open_loop_html(search)]
    elif search.get("tiers"):
        parts += ["<h2>Max agents per tier</h2>", tiers_table_html(search)]
    parts += [
        "<h2>Frontier</h2>",
        '<p class="note">x: p25 output speed per agent; y: input (incl. cached) + output tokens '
        "per second per accelerator. Error bars: 95% session-bootstrap intervals; dashed "
        "verticals: tier speeds.</p>",
        _plot("frontier", frontier_figure(views, tiers)),
        "<h2>Trials</h2>",
        trials_table_html(views, tier_names),
        *_error_reasons_section(views),
        "<h2>Output speed distribution</h2>",
        '<p class="note">Per trial over the requests sent in the window: whiskers p5–p95, '
        "box p25–p75, line the median.</p>",
        _plot("speed-dist", _box(views, "speed_q", "output speed", "tok/s")),
        "<h2>TTFT distribution</h2>",
        '<p class="note">Failed requests (TTFT ∞) are left out of the boxes: '
        + html.escape(
            ", ".join(f"#{v.index}: {v.ttft_failed}" for v in views if v.ttft_failed)
            or "none failed"
        )
        + ".</p>",
        _plot("ttft-dist", _box(views, "ttft_q", "TTFT", "s")),
    ]
    if search:
        parts += [
            "<h2>Search path</h2>",
            '<p class="note">Each trial in order; dotted: each tier\'s max agents.</p>',
            _plot("search-path", search_path_figure(views, search.get("tiers") or {})),
        ]
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{html.escape(title)}</title><style>{CSS}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>{''.join(parts)}</body></html>"
    )


def write_report(
    out_dir: str | os.PathLike[str], *, output: str | os.PathLike[str] | None = None
) -> Path:
    """Write the report of ``out_dir``; returns its path (default DIR/report.html)."""
    search, views = load(out_dir)
    if not views:
        raise ReportError(f"{out_dir}: no trials to report")
    path = Path(output) if output else Path(out_dir) / "report.html"
    title = f"AgentPerf engine report — {Path(out_dir).resolve().name}"
    path.write_text(render(search, views, title=title), encoding="utf-8")
    return path


def _num(value: Any) -> str:
    return "—" if not isinstance(value, int | float) else f"{value:g}"


def max_agents_table(search: dict[str, Any], tiers: Iterable[dict[str, Any]] = ()) -> Any:
    """The rich table ``search`` prints at its end: max agents per tier with its bracket."""
    from rich.table import Table

    speeds = {t.get("name"): t for t in tiers}
    table = Table(title="Max agents per tier")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("tier", "left"),
        ("p25 ≥ tok/s", "right"),
        ("TTFT ≤ s", "right"),
        ("max agents", "right"),
        ("lowest fail", "right"),
        ("confirmed", "center"),
        ("flags", "left"),
    )
    for col, justify in columns:
        table.add_column(col, justify=justify)
    for t in tier_rows(search):
        spec = speeds.get(t["name"], {})
        table.add_row(
            t["name"],
            _num(spec.get("min_p25_output_speed")),
            _num(spec.get("max_ttft_s")),
            str(t["max_agents"]),
            "—" if t["lowest_fail"] is None else str(t["lowest_fail"]),
            "yes" if t["confirmed"] else "no",
            ", ".join(t["flags"]) or "",
        )
    return table


def print_max_agents(out: Any, search: dict[str, Any]) -> None:
    """Print ``max_agents_table`` to the text stream ``out`` (colour only on a terminal)."""
    from rich.console import Console

    isatty = getattr(out, "isatty", None)
    console = Console(file=out, force_terminal=bool(isatty and isatty()), width=120)
    console.print(max_agents_table(search, search.get("tier_definitions") or []))


def add_report_command(sub: Any) -> None:
    """``report DIR [--output FILE]`` on the engine CLI's subparsers."""
    p = sub.add_parser("report", help="self-contained HTML report of a search or trial folder")
    p.add_argument("dir", help="the --out folder of a search or trial")
    p.add_argument("--output", default=None, help="HTML file (default DIR/report.html)")
    p.set_defaults(func=_cmd_report)


def _cmd_report(args: Any) -> int:
    import sys

    try:
        path = write_report(args.dir, output=args.output)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0
