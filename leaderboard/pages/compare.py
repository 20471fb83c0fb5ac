"""The compare page: ratios of results 2..n to result 1 (the baseline, first in the URL) at
the same speed and concurrency, with their tiers, power, cost, loops and config diff."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import Prefetch

from agentperf.engine import frontier
from catalog.models import SloTier
from leaderboard import charts, configview
from leaderboard.cost import CLASS_LABELS, CLASSES, cost_at_speed
from leaderboard.loops import compare_loops_table
from leaderboard.models import Result
from leaderboard.pages.common import bracket_text, loops_json, page_figure, power_cell
from leaderboard.tables import Column, Table

MAX_COMPARE = 4


def _ratio_rows(values: list[float | None], row: dict) -> dict:
    """Each result's value in column v<i> and its ratio to the first in ratio<i>."""
    base = values[0]
    for i, v in enumerate(values):
        row[f"v{i}"] = v
        if i:
            row[f"ratio{i}"] = frontier.ratio(v, base)
    return row


def _read_text(results: list[Result], points: list, speed: float) -> str | None:
    """Which results' figures at ``speed`` are read between measured points (a linear
    reading, not a measurement); None when no result reaches that speed."""
    reads = [frontier.read_at_speed(p, speed) for p in points]
    between = [
        r.display_label
        for r, how in zip(results, reads, strict=True)
        if how == frontier.BETWEEN_POINTS
    ]
    if between:
        return f"{frontier.BETWEEN_POINTS}: " + ", ".join(between)
    return frontier.AT_POINT if any(reads) else None


def _compare_columns(
    results: list[Result], first: Column, kind: str, missing: str = "outside measured range"
) -> list[Column]:
    cols = [first]
    for i, r in enumerate(results):
        cols.append(Column(f"v{i}", r.display_label, kind, missing))
        if i:
            cols.append(
                Column(f"ratio{i}", f"{r.display_label} ÷ {results[0].display_label}", "ratio")
            )
    return cols


Points = list[list[frontier.Point]]
Guides = list[tuple[str, float]]


def _load_results(ids: Sequence[int]) -> tuple[list[Result], list[int]]:
    """The results to compare in URL order (at most MAX_COMPARE) and the ids not found."""
    by_pk = {
        r.pk: r
        for r in Result.objects.for_listing()
        .select_related("submission", "tier_set", "run")
        .prefetch_related(
            Prefetch("tier_set__tiers", queryset=SloTier.objects.order_by("order")),
            "hardware__prices",
        )
        .filter(pk__in=list(ids)[:MAX_COMPARE])
    }
    results = [by_pk[i] for i in ids if i in by_pk]
    missing = [i for i in ids if i not in by_pk]
    return results, missing


def _tier_guides(results: list[Result]) -> Guides:
    """Every tier of every result's tier set as (name, min p25 speed), one per speed,
    slowest first: the rows the per-tier tables share."""
    guides: Guides = []
    for r in results:
        for t in r.tier_set.tiers.all():
            if all(abs(t.min_p25_output_speed - s) > 1e-9 for _, s in guides):
                guides.append((t.name, t.min_p25_output_speed))
    guides.sort(key=lambda g: g[1])
    return guides


def _iso_speed_table(
    results: list[Result], points: Points, guides: Guides, speed: float | None
) -> Table:
    """Throughput per accelerator at each tier's speed (and the reader's), with ratios."""
    speed_rows = []
    for name, s in guides:
        row = {"speed": s, "label": f"{name} ({s:g} tok/s)", "read": _read_text(results, points, s)}
        speed_rows.append(_ratio_rows([frontier.throughput_at_speed(p, s) for p in points], row))
    if speed is not None:
        row = {
            "speed": speed,
            "label": f"your speed ({speed:g} tok/s)",
            "read": _read_text(results, points, speed),
            "_class": "picked",
        }
        speed_rows.append(
            _ratio_rows([frontier.throughput_at_speed(p, speed) for p in points], row)
        )
    return Table(
        "iso_speed",
        "Throughput per accelerator at the same per-agent speed",
        _compare_columns(results, Column("label", "p25 speed per agent"), "float0")
        + [Column("read", "How read", "text", "outside every measured range")],
        speed_rows,
        caption="Read off each result's frontier, interpolated linearly between its measured "
        "points (so marked: a reading, not a measurement); no value outside a result's "
        "measured speed range.",
    )


def _iso_concurrency_table(results: list[Result], points: Points, concurrency: int | None) -> Table:
    """Throughput per accelerator at every concurrency all results ran (and the reader's)."""
    common = frontier.common_concurrencies(*points) if points else []
    n_rows = []
    for n in common:
        row = {"label": f"N = {n}", "concurrency": n}
        n_rows.append(_ratio_rows([frontier.throughput_at_concurrency(p, n) for p in points], row))
    if concurrency is not None:
        row = {"label": f"your N = {concurrency}", "concurrency": concurrency, "_class": "picked"}
        n_rows.append(
            _ratio_rows([frontier.throughput_at_concurrency(p, concurrency) for p in points], row)
        )
    return Table(
        "iso_concurrency",
        "Throughput per accelerator at the same concurrency",
        _compare_columns(results, Column("label", "Concurrency (agents)"), "float0"),
        n_rows,
        caption="Concurrencies every result measured, plus yours (interpolated in N).",
    )


def _single_agent_table(results: list[Result], points: Points) -> Table:
    """Each result's p25 output speed at N = 1, where it ran N = 1."""
    single = [frontier.single_agent(p) for p in points]
    return Table(
        "single_agent",
        "Single-agent speed (p25 output speed at N = 1)",
        _compare_columns(results, Column("label", ""), "float1", "N = 1 not run"),
        [
            _ratio_rows(
                [s[1] if s and s[0] == 1 else None for s in single],
                {"label": "p25 speed at N = 1 (tok/s)"},
            )
        ],
    )


def _max_agents_table(results: list[Result], guides: Guides) -> Table:
    """Max agents per tier, with ratios to the baseline."""
    return Table(
        "max_agents",
        "Max agents per tier",
        _compare_columns(results, Column("label", "Tier"), "int", "never passed"),
        [
            _ratio_rows(
                [r.max_agents.get(name) for r in results],
                {"label": name},
            )
            for name, _ in guides
        ],
    )


def _brackets_table(results: list[Result], guides: Guides) -> Table:
    """Each max-agents figure's bracket and flags, per tier (text, no ratios)."""
    return Table(
        "max_agents_brackets",
        "Max agents: bracket and flags (highest pass … lowest fail)",
        [Column("label", "Tier")]
        + [Column(f"v{i}", r.display_label, "text", "not recorded") for i, r in enumerate(results)],
        [
            {
                "label": name,
                **{f"v{i}": bracket_text(r.tier_brackets.get(name)) for i, r in enumerate(results)},
            }
            for name, _ in guides
        ],
    )


def _power_table(results: list[Result], guides: Guides) -> Table:
    """Agents per MW at max agents per tier, each labelled measured or modelled."""
    return Table(
        "power",
        "Agents per MW at max agents (each figure labelled measured or modelled)",
        [Column("label", "Tier")]
        + [Column(f"v{i}", r.display_label, "text", "not measured") for i, r in enumerate(results)],
        [
            {"label": name, **{f"v{i}": power_cell(r, name) for i, r in enumerate(results)}}
            for name, _ in guides
        ],
        caption="Measured: runner-host telemetry. Modelled: a simulated result's power model "
        "(never a measurement; no ratio is drawn between the two).",
    )


def _cost_table(results: list[Result], guides: Guides) -> Table:
    """$ per million tokens at each tier's speed, per price class (docs/catalog.md "Prices")."""
    cost_rows = []
    for name, s in guides:
        for kind in CLASSES:
            prices = [
                {p.price_class: p for p in r.hardware.prices.all()}.get(kind) for r in results
            ]
            row = {"label": f"{name} ({s:g} tok/s), {CLASS_LABELS[kind]}"}
            cost_rows.append(
                _ratio_rows(
                    [cost_at_speed(r, s, price) for r, price in zip(results, prices, strict=True)],
                    row,
                )
            )
    return Table(
        "cost_iso_speed",
        "$ per million total tokens at the same per-agent speed",
        _compare_columns(
            results, Column("label", "p25 speed per agent, price class"), "float3", "—"
        ),
        cost_rows,
        caption="The deployment's $ per hour at that speed over its throughput read off each "
        'frontier there (docs/catalog.md "Prices"); owned systems with the power '
        'interpolated the same way, measured or (simulated) modelled. "—": no such price '
        "in the catalog, no power, or the speed is outside the result's measured range.",
    )


def _config_diff_table(results: list[Result]) -> tuple[Table, int]:
    """The results' public configurations side by side, and how many fields differ."""
    diff = configview.diff([configview.public_config(r) for r in results])
    table = Table(
        "config_diff",
        "Configuration",
        [Column("field", "Field"), Column("changed", "Changed", "bool")]
        + [Column(f"c{i}", r.display_label) for i, r in enumerate(results)],
        [
            {
                "field": d.path,
                "changed": d.changed,
                **{f"c{i}": v for i, v in enumerate(d.values)},
                "_class": "changed" if d.changed else "",
            }
            for d in diff
        ],
    )
    return table, sum(1 for d in diff if d.changed)


def _speed_readings(results: list[Result], points: Points, speed: float | None) -> list[dict]:
    """The reader's speed, marked on each frontier that reaches it, with how it was read."""
    readings: list[dict] = []
    if speed is None:
        return readings
    for r, p in zip(results, points, strict=True):
        value = frontier.throughput_at_speed(p, speed)
        if value is not None:
            how = frontier.read_at_speed(p, speed)
            readings.append({"x": speed, "y": value, "name": r.display_label, "read": how})
    return readings


def compare_page(
    *, ids: Sequence[int], speed: float | None, concurrency: int | None, log: bool
) -> dict:
    """Ratios of results 2..n to result 1 (the baseline, first in the URL)."""
    results, missing = _load_results(ids)
    if len(results) < 2:
        return {
            "results": results,
            "missing": missing,
            "speed": speed,
            "concurrency": concurrency,
            "figure": None,
            "tables": {},
        }
    points = [r.frontier_points() for r in results]
    guides = _tier_guides(results)
    loops = compare_loops_table(results, [name for name, _ in guides])
    diff_table, changed_count = _config_diff_table(results)
    series = [charts.result_series(r) for r in results]
    readings = _speed_readings(results, points, speed)
    return {
        "results": results,
        "missing": missing,
        "speed": speed,
        "concurrency": concurrency,
        "figure": (
            page_figure(series, guides, log=log, marker_speed=speed, readings=readings)
            if series
            else None
        ),
        "ranges": [frontier.speed_range(p) for p in points],
        "tables": {
            "iso_speed": _iso_speed_table(results, points, guides, speed),
            "iso_concurrency": _iso_concurrency_table(results, points, concurrency),
            "single_agent": _single_agent_table(results, points),
            "max_agents": _max_agents_table(results, guides),
            "max_agents_brackets": _brackets_table(results, guides),
            "power": _power_table(results, guides),
            "loops": loops,
            "cost_iso_speed": _cost_table(results, guides),
            "config_diff": diff_table,
        },
        "changed_count": changed_count,
        "loops_figure": loops_json(loops),
    }
