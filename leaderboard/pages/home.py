"""The home page: the default model's frontier across hardware systems at the chosen tier,
its max agents per system as bars, then the max-agents matrix (best result per model and
hardware) and the latest results."""

from __future__ import annotations

from django.urls import reverse

from catalog.models import AIModel, HardwareSystem, SloTierSet
from catalog.services import default_tier_set_for
from leaderboard import charts
from leaderboard.models import Result
from leaderboard.pages.common import (
    chart_points,
    hidden_simulated_count,
    page_figure,
    result_url,
    results_table,
    tier_guides,
)
from leaderboard.tables import Column, Table

LATEST_COUNT = 10


def _home_results(include_simulated: bool) -> tuple[list[Result], bool]:
    """The published results the page shows, and whether they are all simulated.

    Nothing measured yet (a fresh `make demo`): show the simulated results, each one
    labelled, rather than an empty page; they are still never ranked with measured ones."""
    results = list(Result.objects.public(include_simulated=include_simulated).for_chart())
    simulated_only = False
    if not results and not include_simulated:
        results = list(Result.objects.public(include_simulated=True).for_chart())
        simulated_only = bool(results)
    return results, simulated_only


def _tier_names(tier_set: SloTierSet | None, results: list[Result]) -> list[str]:
    """The tiers the selector offers: the default tier set's, then any other tier a result
    has a max-agents figure for."""
    names = [t for t, _ in tier_guides(tier_set)]
    for r in results:
        names += [n for n in r.max_agents if n not in names]
    return names


def _best_per_pair(results: list[Result], chosen: str | None) -> dict[tuple[int, int], Result]:
    """The result with the most max agents at ``chosen`` per (model, hardware system)."""
    best: dict[tuple[int, int], Result] = {}
    for r in results:
        key = (r.model_id, r.hardware_id)
        value = r.max_agents.get(chosen, 0) if chosen else 0
        if key not in best or value > best[key].max_agents.get(chosen, 0):
            best[key] = r
    return best


def _matrix_table(
    results: list[Result],
    best: dict[tuple[int, int], Result],
    chosen: str | None,
    simulated_only: bool,
) -> Table:
    """Max agents at ``chosen``: one row per model, one column per hardware system."""
    models = sorted({r.model for r in results}, key=lambda m: m.name)
    systems = sorted({r.hardware for r in results}, key=lambda h: h.name)
    columns = [Column("model", "Model")] + [
        Column(f"hw:{h.slug}", f"{h.name} [simulated]" if simulated_only else h.name, "int", "—")
        for h in systems
    ]
    rows = []
    for m in models:
        row: dict = {"model": m.name, "_links": {"model": reverse("model-detail", args=[m.slug])}}
        for h in systems:
            r = best.get((m.pk, h.pk))
            if r is None:
                continue
            row[f"hw:{h.slug}"] = r.max_agents.get(chosen) if chosen else None
            if row[f"hw:{h.slug}"] is None:
                row[f"hw:{h.slug}"] = 0
            row["_links"][f"hw:{h.slug}"] = result_url(r.pk)
        rows.append(row)
    return Table(
        "matrix",
        f"Max agents at {chosen}" if chosen else "Max agents",
        columns,
        rows,
        caption="Best published result per model and hardware system; 0 = the tier never "
        "passed; — = not measured.",
    )


def _lead_results(
    best: dict[tuple[int, int], Result], lead: AIModel | None, chosen: str | None
) -> list[Result]:
    """The lead model's best result per system: measured first, then in the order of the
    figure they show (most agents first), then by system name."""
    shown = [r for r in best.values() if lead is not None and r.model_id == lead.pk]
    shown.sort(key=lambda r: (r.is_simulated, -(r.max_agents.get(chosen) or 0), r.hardware.name))
    return shown


def _bars(shown: list[Result], chosen: str | None) -> list[dict]:
    """One bar per shown result: its max agents at ``chosen`` as a share of the longest."""
    top = max([r.max_agents.get(chosen) or 0 for r in shown] + [1]) if chosen else 1
    return [
        {
            "system": r.hardware.name,
            "label": r.display_label,
            "agents": r.max_agents.get(chosen) if chosen else None,
            "percent": round(100 * ((r.max_agents.get(chosen) or 0) if chosen else 0) / top),
            "simulated": r.is_simulated,
            "url": result_url(r.pk),
        }
        for r in shown
    ]


def home(*, tier: str | None, include_simulated: bool) -> dict:
    """The home page's context: the lead model's frontier and bars at the chosen tier, the
    max-agents matrix and the latest results."""
    results, simulated_only = _home_results(include_simulated)
    tier_set = default_tier_set_for()
    names = _tier_names(tier_set, results)
    chosen = tier if tier in names else (names[0] if names else None)
    best = _best_per_pair(results, chosen)
    matrix = _matrix_table(results, best, chosen, simulated_only)
    lead = _lead_model(results)
    shown = _lead_results(best, lead, chosen)
    # one points lookup for the chart and the latest table (cached per result)
    points = chart_points(list({r.pk: r for r in [*shown, *results[:LATEST_COUNT]]}.values()))
    guides = tier_guides(tier_set)  # the tiers the selector offers, the chosen one marked
    speed = dict(guides).get(chosen) if chosen else None
    series = [
        charts.result_series(r, points=points[r.pk], name=f"{r.hardware.name}: {r.label}")
        for r in shown
    ]
    latest = results_table(
        results[:LATEST_COUNT],
        [chosen] if chosen else [],
        chart=points,
        name="latest",
        title="Latest results",
        show_model=True,
    )
    return {
        "lead": lead,
        "figure": page_figure(series, guides, log=False, marker_speed=speed) if series else None,
        "bars": _bars(shown, chosen),
        "tier": chosen,
        "tier_names": names,
        "tables": {"matrix": matrix, "latest": latest},
        "hidden_simulated": 0 if simulated_only else hidden_simulated_count(include_simulated),
        "simulated_only": simulated_only,
        "catalog": {
            "models": AIModel.objects.count(),
            "hardware": HardwareSystem.objects.count(),
        },
    }


def _lead_model(results: list[Result]) -> AIModel | None:
    """The model the home page charts: the one with the most measured results shown (then
    the most results, then by name)."""
    counts: dict[int, list] = {}
    for r in results:
        entry = counts.setdefault(r.model_id, [0, 0, r.model])
        entry[0] += 0 if r.is_simulated else 1
        entry[1] += 1
    if not counts:
        return None
    return min(counts.values(), key=lambda e: (-e[0], -e[1], e[2].name))[2]
