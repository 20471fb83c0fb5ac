"""A model's page: its sourced catalog rows, every result on it charted and tabled."""

from __future__ import annotations

from collections.abc import Sequence

from catalog.fields import MODEL_FIELDS, sourced_rows
from catalog.models import AIModel
from catalog.services import default_tier_set_for
from leaderboard import charts
from leaderboard.models import Result
from leaderboard.pages.common import (
    chart_points,
    hidden_simulated_count,
    page_figure,
    points_table,
    results_table,
    tier_guides,
)


def model_page(
    *, slug: str, include_simulated: bool, selected: Sequence[int], log: bool
) -> dict | None:
    model = AIModel.objects.filter(slug=slug).first()
    if model is None:
        return None
    tier_set = default_tier_set_for(model)
    tiers = tier_guides(tier_set)
    results = list(
        Result.objects.public(include_simulated=include_simulated).for_chart().filter(model=model)
    )
    # Only simulated results on this model: draw them, labelled, rather than an empty page
    # (as the home page does); they are still never ranked with measured ones.
    simulated_only = False
    if not results and not include_simulated:
        results = list(
            Result.objects.public(include_simulated=True).for_chart().filter(model=model)
        )
        simulated_only = bool(results)
    shown = [r for r in results if r.pk in selected] if selected else results
    points = chart_points(results)
    series = [charts.result_series(r, points=points[r.pk]) for r in shown]
    names = [t for t, _ in tiers]
    return {
        "model": model,
        "rows": sourced_rows(model, MODEL_FIELDS),
        "tier_set": tier_set,
        "tiers": tiers,
        "results": [
            {"id": r.pk, "label": r.display_label, "hardware": r.hardware.name} for r in results
        ],
        "selected": [r.pk for r in shown],
        "figure": page_figure(series, tiers, log=log) if series else None,
        "tables": {
            "results": results_table(results, names, chart=points),
            "points": points_table(series),
        },
        "history": sorted(
            {(r.hardware.slug, r.hardware.name) for r in results}, key=lambda h: h[1]
        ),
        "hidden_simulated": (
            0 if simulated_only else hidden_simulated_count(include_simulated, model=model)
        ),
        "simulated_only": simulated_only,
    }
