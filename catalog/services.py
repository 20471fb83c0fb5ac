"""Catalog writes: the database rows of the catalog files, read and checked by the one
loader (runner.catalog)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from django.db import transaction

from catalog.fields import HARDWARE_FIELDS, MODEL_FIELDS
from catalog.models import AIModel, HardwareSystem, SloTier, SloTierSet
from runner.catalog import CatalogError, as_date, figure_from, load_catalog, lookup


def _fields(entry: dict, fields: list[tuple[str, str, str]], where: str) -> tuple[dict, dict]:
    """The model's column values of ``fields`` and the source of each figure with one."""
    values: dict[str, Any] = {}
    sources: dict[str, dict] = {}
    for path, _label, _unit in fields:
        raw = lookup(entry, path)
        figure = figure_from(raw, path=f"{where}.{path}") if raw is not None else None
        value = figure.value if figure else None
        head, _, rest = path.partition(".")
        if rest:
            values.setdefault(head, {})
            if value is not None:
                values[head][rest] = float(value)
        else:
            values[head] = value
        if figure:
            sources[path] = {"source": figure.source, "note": figure.note}
    return values, sources


@transaction.atomic
def catalog_seed(*, directory: Path | None = None) -> dict[str, int]:
    """Create or update every catalog entry from the data files (as shipped, or those in
    ``directory``); raises runner.catalog.CatalogError naming the file and entry. Idempotent."""
    catalog = load_catalog(directory)
    counts = {"models": 0, "hardware": 0, "tier_sets": 0}
    for entry in catalog.models.values():
        where = f"models.yaml:{entry['slug']}"
        values, sources = _fields(entry, MODEL_FIELDS, where)
        values["release_date"] = as_date(values.get("release_date"), path=f"{where}.release_date")
        values["hf_repo"] = values.get("hf_repo") or ""
        AIModel.objects.update_or_create(
            slug=entry["slug"],
            defaults={
                "name": entry["name"],
                "provider": entry.get("provider") or "",
                "reasoning_mode": entry.get("reasoning_mode") or "",
                "sources": sources,
                **values,
            },
        )
        counts["models"] += 1
    for entry in catalog.systems.values():
        where = f"hardware.yaml:{entry['slug']}"
        values, sources = _fields(entry, HARDWARE_FIELDS, where)
        values["interconnect"] = values.get("interconnect") or ""
        HardwareSystem.objects.update_or_create(
            slug=entry["slug"],
            defaults={
                "name": entry["name"],
                "vendor": entry.get("vendor") or "",
                "accelerator": entry.get("accelerator") or "",
                "runner_pool": entry.get("runner_pool") or entry["slug"],
                "sources": sources,
                **values,
            },
        )
        counts["hardware"] += 1
    for entry in catalog.tier_sets.values():
        where = f"tiers.yaml:{entry['slug']}"
        model = None
        if entry.get("model"):
            model = AIModel.objects.filter(slug=entry["model"]).first()
            if model is None:
                raise CatalogError(f"{where}: unknown model {entry['model']!r}")
        tier_set, _ = SloTierSet.objects.update_or_create(
            slug=entry["slug"],
            defaults={
                "model": model,
                "name": entry["name"],
                "version": entry.get("version", 1),
                "effective_date": as_date(entry.get("effective_date"), path=where)
                or dt.date.today(),
                "source": entry.get("source") or "",
            },
        )
        names = []
        for order, tier in enumerate(entry["tiers"]):
            names.append(tier["name"])
            SloTier.objects.update_or_create(
                tier_set=tier_set,
                name=tier["name"],
                defaults={
                    "order": 1000 + order,  # moved to its final order below
                    "min_p25_output_speed": tier["min_p25_output_speed"],
                    "max_ttft_s": tier["max_ttft_s"],
                    "ttft_percentile": tier.get("ttft_percentile", 75),
                    "max_error_rate": tier.get("max_error_rate", 0.01),
                },
            )
        tier_set.tiers.exclude(name__in=names).delete()
        for order, name in enumerate(names):
            SloTier.objects.filter(tier_set=tier_set, name=name).update(order=order)
        counts["tier_sets"] += 1
    return counts


def default_tier_set_for(model: AIModel | None = None) -> SloTierSet | None:
    """The model's newest sourced tier set, else the project's default set (the one with
    no model); newest by effective date, then version. Tiers prefetched."""
    sets = SloTierSet.objects.prefetch_related("tiers").order_by("-effective_date", "-version")
    own = sets.filter(model=model).first() if model is not None else None
    return own or sets.filter(model__isnull=True).first()
