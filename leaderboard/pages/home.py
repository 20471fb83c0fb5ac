"""The home page: the default model's frontier across hardware systems at the chosen tier,
its max agents per system as bars, then the max-agents matrix (best result per model and
hardware) and the latest results."""

from __future__ import annotations

from django.urls import reverse

from catalog.models import AIModel, HardwareSystem
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


def home(*, tier: str | None, include_simulated: bool) -> dict:
    results = list(Result.objects.public(include_simulated=include_simulated).for_chart())
    # Nothing measured yet (a fresh `make demo`): show the simulated results, each one
    # labelled, rather than an empty page; they are still never ranked with measured ones.
    simulated_only = False
    if not results and not include_simulated:
        results = list(Result.objects.public(include_simulated=True).for_chart())
        simulated_only = bool(results)
    tier_set = default_tier_set_for()
    names = [t for t, _ in tier_guides(tier_set)]
    for r in results:
        names += [n for n in r.max_agents if n not in names]
    chosen = tier if tier in names else (names[0] if names else None)
    models = sorted({r.model for r in results}, key=lambda m: m.name)
    systems = sorted({r.hardware for r in results}, key=lambda h: h.name)
    best: dict[tuple[int, int], Result] = {}
    for r in results:
        key = (r.model_id, r.hardware_id)
        value = r.max_agents.get(chosen, 0) if chosen else 0
        if key not in best or value > best[key].max_agents.get(chosen, 0):
            best[key] = r
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
    matrix = Table(
        "matrix",
        f"Max agents at {chosen}" if chosen else "Max agents",
        columns,
        rows,
        caption="Best published result per model and hardware system; 0 = the tier never "
        "passed; — = not measured.",
    )
    lead = _lead_model(results)
    shown = [r for r in best.values() if lead is not None and r.model_id == lead.pk]
    # measured first; the bars in the order of the figure they show
    shown.sort(key=lambda r: (r.is_simulated, -(r.max_agents.get(chosen) or 0), r.hardware.name))
    # one points lookup for the chart and the latest table (cached per result)
    points = chart_points(list({r.pk: r for r in [*shown, *results[:LATEST_COUNT]]}.values()))
    guides = tier_guides(tier_set)  # the tiers the selector offers, the chosen one marked
    speed = dict(guides).get(chosen) if chosen else None
    series = [
        charts.result_series(r, points=points[r.pk], name=f"{r.hardware.name}: {r.label}")
        for r in shown
    ]
    top = max([r.max_agents.get(chosen) or 0 for r in shown] + [1]) if chosen else 1
    bars = [
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
    latest = results_table(
        results[:LATEST_COUNT],
        [chosen] if chosen else [],
        points=points,
        name="latest",
        title="Latest results",
        show_model=True,
    )
    return {
        "lead": lead,
        "figure": page_figure(series, guides, log=False, marker_speed=speed) if series else None,
        "bars": bars,
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
