"""Catalog writes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import yaml
from django.db import transaction

from catalog.fields import HARDWARE_FIELDS, MODEL_FIELDS
from catalog.models import AIModel, HardwareSystem, SloTier, SloTierSet
from runner.simulator.catalog import DEFAULT_CATALOG_DIR

CATALOG_DIR = DEFAULT_CATALOG_DIR


class CatalogError(Exception):
    """A catalog data file that does not fit the expected shape (names file and entry)."""


def _figure(entry: dict, path: str, where: str) -> tuple[Any, dict | None]:
    head, _, rest = path.partition(".")
    raw = entry.get(head)
    if rest:
        raw = (raw or {}).get(rest)
    if raw is None:
        return None, None
    if isinstance(raw, dict):
        if "value" not in raw:
            raise CatalogError(f"{where}.{path}: a figure needs 'value' (null when unknown)")
        value = raw.get("value")
        if value is not None and not raw.get("source"):
            raise CatalogError(f"{where}.{path}: value {value!r} has no source")
        source = {"source": raw.get("source") or "", "note": raw.get("note") or ""}
        return value, source
    return raw, None


def _load(name: str, key: str, directory: Path) -> list[dict]:
    path = directory / name
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogError(f"{path}: {exc}") from exc
    items = data.get(key)
    if not isinstance(items, list):
        raise CatalogError(f"{path}: expected a top-level list '{key}'")
    return items


def _as_date(value: Any, where: str) -> dt.date | None:
    if value in (None, ""):
        return None
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        raise CatalogError(f"{where}: {value!r} is not an ISO date") from None


def _fields(entry: dict, fields: list[tuple[str, str, str]], where: str) -> tuple[dict, dict]:
    values: dict[str, Any] = {}
    sources: dict[str, dict] = {}
    for path, _label, _unit in fields:
        value, source = _figure(entry, path, where)
        head, _, rest = path.partition(".")
        if rest:
            values.setdefault(head, {})
            if value is not None:
                values[head][rest] = float(value)
        else:
            values[head] = value
        if source:
            sources[path] = source
    return values, sources


@transaction.atomic
def catalog_seed(*, directory: Path = CATALOG_DIR) -> dict[str, int]:
    """Create or update every catalog entry from the data files. Idempotent."""
    counts = {"models": 0, "hardware": 0, "tier_sets": 0}
    for entry in _load("models.yaml", "models", directory):
        where = f"models.yaml:{entry.get('slug')}"
        values, sources = _fields(entry, MODEL_FIELDS, where)
        values["release_date"] = _as_date(values.get("release_date"), where)
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
    for entry in _load("hardware.yaml", "systems", directory):
        where = f"hardware.yaml:{entry.get('slug')}"
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
    for entry in _load("tiers.yaml", "tier_sets", directory):
        where = f"tiers.yaml:{entry.get('slug')}"
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
                "effective_date": _as_date(entry.get("effective_date"), where) or dt.date.today(),
                "source": entry.get("source") or "",
            },
        )
        names = []
        for order, tier in enumerate(entry.get("tiers") or []):
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
