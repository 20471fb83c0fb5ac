"""A model on one hardware system over time: every result of the pair on one chart."""

from __future__ import annotations

from catalog.models import AIModel, HardwareSystem
from catalog.services import default_tier_set_for
from leaderboard import charts
from leaderboard.models import Result
from leaderboard.pages.common import (
    chart_points,
    page_figure,
    points_table,
    results_table,
    tier_guides,
)


def history_page(
    *, model_slug: str, hardware_slug: str, include_simulated: bool, log: bool
) -> dict | None:
    model = AIModel.objects.filter(slug=model_slug).first()
    system = HardwareSystem.objects.filter(slug=hardware_slug).first()
    if model is None or system is None:
        return None
    qs = Result.objects.for_chart().filter(model=model, hardware=system).order_by("published_at")
    if not include_simulated:
        qs = qs.filter(is_simulated=False)
    results = list(qs)
    charted = [r for r in results if r.status != Result.STATUS_INVALIDATED]
    tier_set = default_tier_set_for(model)
    tiers = tier_guides(tier_set)
    points = chart_points(results)
    series = [charts.result_series(r, points=points[r.pk]) for r in charted]
    return {
        "model": model,
        "system": system,
        "figure": page_figure(series, tiers, log=log) if series else None,
        "tables": {
            "results": results_table(
                results,
                [t for t, _ in tiers],
                chart=points,
                title="Results over time",
                show_hardware=False,
                show_status=True,
            ),
            "points": points_table(series),
        },
        "hidden_simulated": 0
        if include_simulated
        else Result.objects.filter(model=model, hardware=system, is_simulated=True).count(),
    }
