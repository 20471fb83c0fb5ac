"""The methodology page: every tier set's thresholds and the engine's constants."""

from __future__ import annotations

from django.db.models import Prefetch

from catalog.models import SloTier, SloTierSet
from leaderboard.methodology import engine_constants
from leaderboard.pages.common import criterion_text
from leaderboard.tables import Column, Table


def methodology_page() -> dict:
    sets = list(
        SloTierSet.objects.select_related("model")
        .prefetch_related(Prefetch("tiers", queryset=SloTier.objects.order_by("order")))
        .order_by("model__name", "-effective_date")
    )
    tables = {}
    for ts in sets:
        tables[ts.slug] = Table(
            ts.slug,
            f"{ts.name} v{ts.version}"
            + (f" — {ts.model.name}" if ts.model else " — project default"),
            [
                Column("tier", "Tier"),
                Column("min_p25_speed", "Min p25 output speed (tok/s per agent)", "float0"),
                Column("max_ttft", "Max TTFT (s)", "float1"),
                Column("ttft_percentile", "at TTFT percentile", "int"),
                Column("max_error_rate", "Max error rate", "pct"),
            ],
            [
                {
                    "tier": t.name,
                    "min_p25_speed": t.min_p25_output_speed,
                    "max_ttft": t.max_ttft_s,
                    "ttft_percentile": t.ttft_percentile,
                    "max_error_rate": t.max_error_rate,
                }
                for t in ts.tiers.all()
            ],
            caption=f"Effective {ts.effective_date}; source: {ts.source}; criterion: "
            f"{criterion_text(ts)}",
        )
    return {
        "tier_tables": list(tables.items()),
        "tables": tables,
        "engine": engine_constants(),
    }
