"""Catalog writes: the database rows of the catalog files, read and checked by the one
loader (agentperf.catalog_data)."""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path
from typing import Any

from django.db import transaction

from agentperf.catalog_data import (
    PRICE_FIGURES,
    CatalogError,
    as_date,
    catalog_dir,
    figure_from,
    load_catalog,
    lookup,
)
from catalog.fields import HARDWARE_FIELDS, MODEL_FIELDS
from catalog.models import (
    WORKLOAD_CODING,
    WORKLOADS,
    AIModel,
    HardwarePrice,
    HardwareSystem,
    SloTier,
    SloTierSet,
)


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


def _seed_model(entry: dict[str, Any]) -> None:
    """Create or update one models.yaml entry, with the source of each figure."""
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


def _seed_system(entry: dict[str, Any]) -> None:
    """Create or update one hardware.yaml entry; its runner pool defaults to its slug."""
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


def _seed_tier_set(entry: dict[str, Any]) -> None:
    """Create or update one tiers.yaml entry and its tiers in file order; a tier taken out
    of the file is deleted."""
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
            "effective_date": as_date(entry.get("effective_date"), path=where) or dt.date.today(),
            "source": entry.get("source") or "",
            "criterion": entry.get("criterion", SloTierSet.CRITERION_REQUESTS),
            "min_session_share": entry.get("min_session_share", 0.95),
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


def _seed_price(entry: dict[str, Any]) -> int:
    """Create or update one prices.yaml entry (the figures of its price class, each with
    its source; the other classes' figures empty) and return its primary key."""
    where = f"prices.yaml:{entry['slug']}"
    values: dict[str, Any] = {}
    sources: dict[str, dict] = {}
    for name in PRICE_FIGURES[entry["class"]]:
        figure = figure_from(entry[name], path=f"{where}.{name}")
        values[name] = None if figure.value is None else float(figure.value)
        sources[name] = {"source": figure.source, "note": figure.note}
    system = HardwareSystem.objects.get(slug=entry["system"])
    price, _ = HardwarePrice.objects.update_or_create(
        system=system,
        price_class=entry["class"],
        defaults={
            "slug": entry["slug"],
            "date": as_date(entry["date"], path=f"{where}.date"),
            "usd_per_accelerator_hour": None,
            "capex_usd_per_system": None,
            "amortization_years": None,
            "usd_per_kwh": None,
            "pue": None,
            "sources": sources,
            **values,
        },
    )
    return int(price.pk)


@transaction.atomic
def catalog_seed(*, directory: Path | None = None) -> dict[str, int]:
    """Create or update every catalog entry from the data files (as shipped, or those in
    ``directory``); raises agentperf.catalog_data.CatalogError naming the file and entry. Idempotent."""
    catalog = load_catalog(directory)
    workload_tier_sets(directory)  # checks each tier set's workload
    counts = {"models": 0, "hardware": 0, "tier_sets": 0, "prices": 0}
    for entry in catalog.models.values():
        _seed_model(entry)
        counts["models"] += 1
    for entry in catalog.systems.values():
        _seed_system(entry)
        counts["hardware"] += 1
    for entry in catalog.tier_sets.values():
        _seed_tier_set(entry)
        counts["tier_sets"] += 1
    kept = []
    for entry in catalog.prices.values():
        kept.append(_seed_price(entry))
        counts["prices"] += 1
    # a price taken out of the file is gone: its figures show "—", never a stale number
    HardwarePrice.objects.exclude(pk__in=kept).delete()
    return counts


def workload_tier_sets(directory: Path | None = None) -> dict[str, str]:
    """Slug → workload of the catalog's tier sets made for a workload other than agentic
    coding (a tier set's ``workload`` in agentperf/catalog_data/tiers.yaml, e.g. decode-heavy)."""
    return dict(_workload_tier_sets(str(catalog_dir(directory) or "")))


@functools.lru_cache(maxsize=8)
def _workload_tier_sets(directory: str) -> tuple[tuple[str, str], ...]:
    sets = load_catalog(Path(directory) if directory else None).tier_sets
    out = []
    for slug, entry in sets.items():
        workload = entry.get("workload", WORKLOAD_CODING)
        if workload not in WORKLOADS:
            raise CatalogError(
                f"tiers.yaml:{slug}.workload: expected one of {', '.join(WORKLOADS)}, "
                f"got {workload!r}"
            )
        if workload != WORKLOAD_CODING:
            out.append((slug, str(workload)))
    return tuple(out)


def default_tier_set_for(
    model: AIModel | None = None, workload: str = WORKLOAD_CODING
) -> SloTierSet | None:
    """The model's newest sourced tier set, else the project's default set (the one with
    no model); newest by effective date, then version. Tiers prefetched. A workload with a
    tier set of its own (``workload_tier_sets``: decode-heavy) gets that set; those sets are
    never the default of agentic coding (or of a workload without one)."""
    sets = SloTierSet.objects.prefetch_related("tiers").order_by("-effective_date", "-version")
    special = workload_tier_sets()
    if workload != WORKLOAD_CODING:
        own_sets = [slug for slug, w in special.items() if w == workload]
        found = sets.filter(slug__in=own_sets).first() if own_sets else None
        if found is not None:
            return found
    sets = sets.exclude(slug__in=list(special))
    own = sets.filter(model=model).first() if model is not None else None
    return own or sets.filter(model__isnull=True).first()
