"""A hardware system's page: its sourced catalog rows, every model measured on it."""

from __future__ import annotations

from collections import defaultdict

from catalog.fields import HARDWARE_FIELDS, sourced_rows
from catalog.models import HardwareSystem
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


def hardware_page(*, slug: str, include_simulated: bool, log: bool) -> dict | None:
    system = HardwareSystem.objects.filter(slug=slug).first()
    if system is None:
        return None
    results = list(
        Result.objects.public(include_simulated=include_simulated)
        .for_chart()
        .filter(hardware=system)
        .order_by("model__name", "-published_at")
    )
    points = chart_points(results)
    tier_set = default_tier_set_for()
    tiers = tier_guides(tier_set)
    series = [
        charts.result_series(r, points=points[r.pk], name=f"{r.model.name} — {r.label}")
        for r in results
    ]
    by_model: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_model[r.model.name].append(r)
    return {
        "system": system,
        "rows": sourced_rows(system, HARDWARE_FIELDS),
        "tiers": tiers,
        "figure": page_figure(series, tiers, log=log) if series else None,
        "models": [
            {"name": name, "slug": rs[0].model.slug, "count": len(rs)}
            for name, rs in by_model.items()
        ],
        "tables": {
            "results": results_table(
                results,
                [t for t, _ in tiers],
                chart=points,
                show_model=True,
                show_hardware=False,
            ),
            "points": points_table(series),
        },
        "hidden_simulated": hidden_simulated_count(include_simulated, hardware=system),
    }
