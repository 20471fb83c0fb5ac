"""The home page: the max-agents matrix (best result per model and hardware) and the latest
results."""

from __future__ import annotations

from django.urls import reverse

from catalog.models import AIModel, HardwareSystem
from catalog.services import default_tier_set_for
from leaderboard.models import Result
from leaderboard.pages.common import (
    chart_points,
    hidden_simulated_count,
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
    latest = results_table(
        results[:LATEST_COUNT],
        [chosen] if chosen else [],
        points=chart_points(results[:LATEST_COUNT]),
        name="latest",
        title="Latest results",
        show_model=True,
    )
    return {
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
