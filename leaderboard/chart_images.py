"""Static PNG and SVG images of a frontier chart, for posts, slides and Open Graph cards.

Rendered server-side with matplotlib (Agg and its SVG backend): no browser process, no
network, the same bytes for the same data, and 0.06–0.3 s per image (docs/api.md). The
image draws what the interactive chart draws (`leaderboard.charts`, docs/engine.md
"Frontier and comparisons"): x = p25 output speed per agent, y = throughput per
accelerator, one line per result through its points in concurrency order, tier speeds as
dashed verticals (the chosen tier solid), Okabe–Ito colours with varying marker shapes, and
simulated results dotted with open markers and named as simulated.

Why matplotlib rather than kaleido: kaleido needs a Chromium it drives over a pipe per
render (and a package this project's index does not carry); matplotlib is a plain library,
thread-safe enough under one lock, with deterministic output (docs/api.md "Embeds").
"""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from leaderboard.charts import OKABE_ITO, X_TITLE, Y_TITLE, trace_name

FORMATS = {"png": "image/png", "svg": "image/svg+xml"}
# 1200 × 630: the Open Graph card size most sites crop to
WIDTH_IN, HEIGHT_IN, DPI = 12.0, 6.3, 100
MARKERS = ["o", "s", "D", "^", "v", "X", "P", "*"]
SIM_COLOUR = "#A0507A"
# matplotlib's text layout and font cache are process-global; one render at a time
_LOCK = threading.Lock()

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _draw_series(ax: Axes, series: Sequence[dict]) -> None:
    """One line per result through its points in concurrency order: Okabe–Ito colours with
    varying markers, simulated results dotted with open markers."""
    for index, s in enumerate(series):
        colour = OKABE_ITO[index % len(OKABE_ITO)]
        marker = MARKERS[(index // len(OKABE_ITO) + index) % len(MARKERS)]
        sim = bool(s["is_simulated"])
        points = sorted(s["points"], key=lambda p: p[0])
        ax.plot(
            [p[1] for p in points],
            [p[2] for p in points],
            color=colour,
            linestyle=":" if sim else "-",
            linewidth=2,
            marker=marker,
            markersize=7,
            markerfacecolor="white" if sim else colour,
            markeredgecolor=colour,
            label=trace_name(s),
        )


def _draw_tiers(ax: Axes, tiers: Sequence[tuple[str, float]], chosen_tier: str | None) -> None:
    """Each tier's speed as a dashed vertical with its name on top; the chosen one solid."""
    for name, speed in tiers:
        picked = name == chosen_tier
        ax.axvline(
            speed,
            color="#000" if picked else "#777",
            linestyle="-" if picked else "--",
            linewidth=2 if picked else 1,
        )
        ax.annotate(
            name,
            (speed, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, 3),
            textcoords="offset points",
            fontsize=10,
            fontweight="bold" if picked else "normal",
            color="#222" if picked else "#555",
        )


def _style_axes(ax: Axes) -> None:
    """Axis titles, thousands-separated throughput, a light grid, no top or right spine."""
    ax.yaxis.set_major_formatter(lambda value, _: f"{value:,.0f}")  # a FuncFormatter
    ax.set_xlabel(X_TITLE)
    ax.set_ylabel(Y_TITLE, fontsize=9)
    ax.grid(True, color="#e5e5e5")
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _draw_legend(ax: Axes, series: Sequence[dict]) -> None:
    """The legend below the axes, or "No published results" where there is nothing drawn."""
    if series:
        ax.legend(
            loc="upper center",
            bbox_to_anchor=(0.5, -0.13),
            ncol=min(3, len(series)),
            frameon=False,
            fontsize=9,
        )
    else:
        ax.text(
            0.5,
            0.5,
            "No published results",
            ha="center",
            va="center",
            fontsize=14,
            transform=ax.transAxes,
            color="#555",
        )


def _draw(
    fig: Figure,
    *,
    title: str,
    series: Sequence[dict],
    tiers: Sequence[tuple[str, float]],
    chosen_tier: str | None,
    footer: str,
) -> None:
    """The whole chart on ``fig``, drawn in a fixed order (the same data, the same bytes)."""
    ax = fig.add_axes((0.07, 0.25, 0.9, 0.62))
    fig.suptitle(title, x=0.07, y=0.97, ha="left", fontsize=16, fontweight="bold")
    _draw_series(ax, series)
    _draw_tiers(ax, tiers, chosen_tier)
    _style_axes(ax)
    _draw_legend(ax, series)
    if any(s["is_simulated"] for s in series):
        fig.text(
            0.07,
            0.905,
            "Dotted lines, open markers: SIMULATED results (not measured hardware)",
            fontsize=10,
            color=SIM_COLOUR,
        )
    fig.text(0.99, 0.01, footer, ha="right", va="bottom", fontsize=9, color="#555")


def render(
    fmt: str,
    *,
    title: str,
    series: Sequence[dict],
    tiers: Sequence[tuple[str, float]] = (),
    chosen_tier: str | None = None,
    footer: str = "AgentPerf Leaderboard",
) -> bytes:
    """The frontier of `series` (as `charts.result_series` gives) as PNG or SVG bytes."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}")
    # matplotlib (and numpy under it) is imported at the first image, not at every process's
    # start: it was 0.9 of the web app's 2.2 CPU s per start (docs/benchmarks.md "Process
    # starts").
    # Figure and the canvases directly, never pyplot: no GUI backend, no global figure state.
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    # text.parse_math off: names and labels are data, never mathtext (a "$" in one raised)
    with (
        _LOCK,
        matplotlib.rc_context(
            {"svg.hashsalt": "agentperf", "font.family": "DejaVu Sans", "text.parse_math": False}
        ),
    ):
        fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, facecolor="white")
        _draw(fig, title=title, series=series, tiers=tiers, chosen_tier=chosen_tier, footer=footer)
        out = io.BytesIO()
        if fmt == "png":
            FigureCanvasAgg(fig).print_png(out, metadata={"Software": None})
        else:
            # no date: the same data gives the same bytes
            FigureCanvasSVG(fig).print_svg(out, metadata={"Date": None})
        return out.getvalue()
