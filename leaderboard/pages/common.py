"""Pieces several public pages share: tier guides, result URLs, the per-result chart points
cache, the results and frontier points tables, a page's figure and the cells they format."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

from django.core.cache import cache
from django.urls import reverse

from catalog.models import SloTierSet
from leaderboard import charts
from leaderboard.energy import MODELLED, labelled, power_source
from leaderboard.loops import loops_figure
from leaderboard.models import Result
from leaderboard.result_documents import Quality, TierBracket
from leaderboard.tables import Column, LazyRows, Table


def tier_guides(tier_set: SloTierSet | None) -> list[tuple[str, float]]:
    if tier_set is None:
        return []
    return [(t.name, t.min_p25_output_speed) for t in tier_set.tiers.all()]


@functools.lru_cache(maxsize=8192)
def result_url(pk: int) -> str:
    # a page rebuild asks for each result's URL two or three times; reverse() costs ~40 µs
    return reverse("result-detail", args=[pk])


def hidden_simulated_count(include_simulated: bool, **filters) -> int:
    if include_simulated:
        return 0
    return Result.objects.filter(
        status=Result.STATUS_PUBLISHED, is_simulated=True, **filters
    ).count()


POINTS_TIMEOUT_S = 7 * 24 * 3600


# v2: each compact point carries its interval bounds (charts.compact_points)
POINTS_KEY = "lb:points:v2:"


def chart_points(results: Sequence[Result]) -> dict[int, list[list]]:
    """Compact chart points per result id. A result's points never change after publishing,
    so they are cached per result (no generation): a page after a publish decodes only the
    new result's points document, not all of them (one query for the misses, if any)."""
    keys = {f"{POINTS_KEY}{r.pk}": r.pk for r in results}
    out = {keys[k]: v for k, v in cache.get_many(list(keys)).items()}
    missing = [r.pk for r in results if r.pk not in out]
    if missing:
        fresh = {
            r.pk: charts.compact_points(r.published_points)
            for r in Result.objects.filter(pk__in=missing).only("pk", "points")
        }
        cache.set_many({f"{POINTS_KEY}{pk}": v for pk, v in fresh.items()}, POINTS_TIMEOUT_S)
        out.update(fresh)
    return out


def single_agent_speed(points: list[list]) -> float | None:
    """p25 speed at N = 1 (repeats averaged) from compact points; None if N = 1 wasn't run."""
    at_one = [p[1] for p in points if p[0] == 1]
    return sum(at_one) / len(at_one) if at_one else None


def quality_cell(quality: Quality | None) -> str:
    """The quality floor in one cell: the figures, or why there are none."""
    status = quality.status if quality is not None else "not_measured"
    if quality is not None and status in ("pass", "fail") and quality.mean_kl is not None:
        return f"{status}: KL {quality.mean_kl:.4f} · top-1 {quality.top1_agreement or 0:.1%}"
    return {"simulated": "simulated", "no_reference": "no reference"}.get(status, "not measured")


FLAG_TEXT = {
    "failed_confirmation": "failed confirmation",
    "non_monotone": "non-monotone",
    "capped": "capped (no fail up to the cap)",
    "unconfirmed": "unconfirmed",
    "trial_budget_exhausted": "trial budget exhausted",
}


def bracket_text(bracket: TierBracket | None) -> str | None:
    """A max-agents figure's bracket and flags in one cell: "12 … 14 · confirmed ·
    marginal" (highest pass … lowest fail); None when the result has no bracket stored."""
    if bracket is None:
        return None
    low = bracket.lowest_fail
    parts = [
        f"{bracket.highest_pass:,} … {low:,}"
        if low is not None
        else f"{bracket.highest_pass:,} … no fail"
    ]
    if bracket.confirmed:
        parts.append("confirmed")
    parts += [FLAG_TEXT.get(f, f) for f in bracket.flags if f != "marginal"]
    if bracket.marginal:
        parts.append("marginal")
    return " · ".join(parts)


def power_cell(result: Result, tier: str) -> str | None:
    """A result's agents per MW at ``tier`` as text with its label: measured from runner-host
    telemetry, or (simulated results only) modelled, with tokens per joule beside it; None
    when there is neither. A measured result never shows a modelled figure."""
    source = power_source(result)
    if source == MODELLED:
        modelled = result.modelled.tiers.get(tier) if result.modelled else None
        if modelled is None:
            return None
        tpj = modelled.tokens_per_joule
        return (
            f"{modelled.agents_per_mw:,.0f}"
            + (f" · {tpj:,.2f} tok/J" if tpj else "")
            + f" ({MODELLED})"
        )
    if source is not None:
        return labelled((result.agents_per_mw or {}).get(tier), source)
    return None


def results_table(
    results: Sequence[Result],
    tier_names: Sequence[str],
    *,
    chart: dict[int, list[list]],
    name: str = "results",
    title: str = "Results",
    show_model: bool = False,
    show_hardware: bool = True,
    show_status: bool = False,
) -> Table:
    """One row per result: what a ranking needs, simulated ones labelled. ``chart``: each
    result's compact chart points (``chart_points``), by result id."""
    columns = [Column("label", "Result")]
    if show_model:
        columns.append(Column("model", "Model"))
    if show_hardware:
        columns.append(Column("hardware", "Hardware"))
    columns += [
        Column("published", "Published"),
        Column("accelerators_used", "Accelerators used", "int"),
    ]
    for t in tier_names:
        columns.append(Column(f"max_agents:{t}", f"Max agents @ {t}", "int", "none"))
        columns.append(Column(f"bracket:{t}", f"Pass … fail @ {t}", "text", "not recorded"))
    if tier_names:
        columns.append(
            Column(f"per_accel:{tier_names[0]}", f"Agents / accel. @ {tier_names[0]}", "float3")
        )
    if tier_names:
        columns.append(
            Column(
                f"power:{tier_names[0]}", f"Agents / MW @ {tier_names[0]}", "text", "not measured"
            )
        )
    columns += [
        Column("single_agent_speed", "Single-agent speed (tok/s)", "float1"),
        Column("quality", "Quality (KL · top-1)"),
        Column("simulated", "Simulated", "bool"),
    ]
    if show_status:
        columns.append(Column("status", "Status"))
    rows = []
    urls: dict[tuple[str, str], str] = {}

    def url(name: str, slug: str) -> str:
        if (name, slug) not in urls:
            urls[name, slug] = reverse(name, args=[slug])
        return urls[name, slug]

    for r in results:
        row = {
            "label": r.display_label,
            "model": r.model.name,
            "hardware": r.hardware.name,
            "published": r.published_at.date().isoformat(),
            "accelerators_used": r.accelerators_used,
            "single_agent_speed": single_agent_speed(chart.get(r.pk, [])),
            "quality": quality_cell(r.quality_floor),
            "simulated": r.is_simulated,
            "status": r.status + (f": {r.status_reason}" if r.status_reason else ""),
            "result_id": r.pk,
            "_links": {
                "label": result_url(r.pk),
                "model": url("model-detail", r.model.slug),
                "hardware": url("hardware-detail", r.hardware.slug),
            },
            "_class": "sim" if r.is_simulated else "",
        }
        for t in tier_names:
            row[f"max_agents:{t}"] = r.max_agents.get(t)
            row[f"bracket:{t}"] = bracket_text(r.tier_brackets.get(t))
        if tier_names:
            row[f"per_accel:{tier_names[0]}"] = r.agents_per_accelerator.get(tier_names[0])
            row[f"power:{tier_names[0]}"] = power_cell(r, tier_names[0])
        rows.append(row)
    columns.append(Column("result_id", "Result ID", "int"))
    return Table(name, title, columns, rows)


def page_figure(
    series: list[dict],
    tiers: Iterable[tuple[str, float]],
    *,
    log: bool,
    marker_speed: float | None = None,
    height: int = charts.HEIGHT,
    readings: Sequence[dict] = (),
) -> dict:
    figure = charts.frontier_figure(
        series, tiers=tiers, log=log, marker_speed=marker_speed, height=height, readings=readings
    )
    return {
        "json": charts.figure_json(figure),
        "traces": len(series),
        "height": height,
        "log": log,
        "simulated": any(s["is_simulated"] for s in series),
        # simulated results drawn whose twin profile is quarantined: the chart warns
        "quarantined": sum(s.get("twin") == "quarantined" for s in series),
    }


POINTS_INLINE_ROWS = 60


def points_table(series: list[dict], name: str = "points") -> Table:
    """Every frontier point of every charted result (the chart's data, readable without JS).

    Its rows are built only when used (CSV, or a page small enough to list them inline)."""
    columns = [
        Column("result", "Result"),
        Column("concurrency", "Concurrency (agents)", "int"),
        Column("p25_speed", "p25 speed (tok/s)", "float1"),
        Column("p25_speed_low", "p25 speed 95% CI low", "float1", "not measured"),
        Column("p25_speed_high", "p25 speed 95% CI high", "float1", "not measured"),
        Column("ttft_p75_s", "TTFT p75 (s)", "float2", "∞ (failed requests)"),
        Column("throughput_per_accelerator", "Throughput / accel. (tok/s)", "float0"),
        Column("throughput_low", "Throughput 95% CI low", "float0", "not measured"),
        Column("throughput_high", "Throughput 95% CI high", "float0", "not measured"),
        Column("agents_per_accelerator", "Agents / accel.", "float3"),
        Column("simulated", "Simulated", "bool"),
        Column("result_id", "Result ID", "int"),
    ]
    rows = LazyRows(sum(len(s["points"]) for s in series), functools.partial(_points_rows, series))
    # The chart already carries these points: listed inline only while short (one result's
    # trials); beyond that the CSV has them (issue 35: a page's chart data sent once).
    return Table(name, "Frontier points", columns, rows, inline_limit=POINTS_INLINE_ROWS)


def _points_rows(series: list[dict]) -> list[dict]:
    rows = []
    for s in series:
        name_ = charts.trace_name(s)
        links = {"result": result_url(s["id"])}
        for n, x, y, ttft, apa, _, bounds in s["points"]:
            rows.append(
                {
                    "result": name_,
                    "concurrency": n,
                    "p25_speed": x,
                    "p25_speed_low": bounds[0],
                    "p25_speed_high": bounds[1],
                    "ttft_p75_s": ttft,
                    "throughput_per_accelerator": y,
                    "throughput_low": bounds[2],
                    "throughput_high": bounds[3],
                    "agents_per_accelerator": apa,
                    "simulated": s["is_simulated"],
                    "result_id": s["id"],
                    "_links": links,
                }
            )
    return rows


def criterion_text(tier_set: SloTierSet) -> str:
    """How the tier set judges a trial (docs/engine.md "Session SLOs")."""
    if getattr(tier_set, "criterion", "requests") == "sessions":
        return f"sessions: ≥ {tier_set.min_session_share:.0%} of sessions meet the tier"
    return "requests: p25 over requests (default)"


def loops_json(table: Table) -> str | None:
    """The two loops' chart as a JSON data block (leaderboard.loops.loops_figure)."""
    figure = loops_figure(table.rows)
    return None if figure is None else charts.figure_json(figure)
