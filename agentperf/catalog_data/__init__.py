"""The catalog's data side: its data files and their one loader (no Django). The web
side's tables, seeded from them, are the Django app ``catalog/``.

``models.yaml``, ``hardware.yaml`` and ``tiers.yaml`` ship in this package (package data of
``runner``; docs/catalog.md). Every figure is ``{value: X | null, source: URL, note: str}``;
`load_catalog` reads the three files, checks their shape (a top-level list of entries, each
with a unique slug, every figure with a value naming its source, every tier set with its
tiers) and returns the entries as parsed. The simulator takes plain numbers with their
provenance from it (`figure_from`), the engine's ladder its tier sets, and the web's
``catalog_seed`` writes the database from it.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml

# The files as shipped; AGENTPERF_CATALOG_DIR (or a caller's directory) points elsewhere.
DEFAULT_CATALOG_DIR = Path(__file__).resolve().parent
CATALOG_DIR_ENV = "AGENTPERF_CATALOG_DIR"
FILES = {"models": "models.yaml", "systems": "hardware.yaml", "tier_sets": "tiers.yaml"}
# Read when present (a directory without it has no prices: every cost figure shows "—")
PRICES_FILE = "prices.yaml"
# docs/catalog.md "Prices": on-demand cloud, neocloud, owned (capex + power)
PRICE_ON_DEMAND = "on-demand"
PRICE_NEOCLOUD = "neocloud"
PRICE_OWNED = "owned"
PRICE_CLASSES = (PRICE_ON_DEMAND, PRICE_NEOCLOUD, PRICE_OWNED)
# the figures each class needs (a figure may be null: unknown, shown as "—")
PRICE_FIGURES = {
    PRICE_ON_DEMAND: ("usd_per_accelerator_hour",),
    PRICE_NEOCLOUD: ("usd_per_accelerator_hour",),
    PRICE_OWNED: ("capex_usd_per_system", "amortization_years", "usd_per_kwh", "pue"),
}


class CatalogError(ValueError):
    """The catalog files are missing, malformed, or lack an entry the caller asked for."""


@dataclass(slots=True, frozen=True)
class Figure:
    """One catalog number with its provenance."""

    value: Any
    source: str
    note: str = ""


def figure_from(raw: Any, *, path: str) -> Figure:
    """Unwrap a ``{value, source, note}`` mapping; a bare scalar is refused (it has no source)."""
    if not isinstance(raw, dict) or "value" not in raw:
        raise CatalogError(f"{path}: expected a figure {{value, source, note}}, got {raw!r}")
    source = raw.get("source") or ""
    if raw["value"] is not None and not str(source).strip():
        raise CatalogError(f"{path}: value {raw['value']!r} has no source")
    return Figure(value=raw["value"], source=str(source), note=str(raw.get("note") or ""))


def as_date(value: Any, *, path: str) -> dt.date | None:
    """An ISO date (``2026-11-01``) or None for an empty value."""
    if value in (None, ""):
        return None
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        raise CatalogError(f"{path}: {value!r} is not an ISO date") from None


@dataclass(slots=True, frozen=True)
class Catalog:
    models: dict[str, dict[str, Any]]
    systems: dict[str, dict[str, Any]]
    tier_sets: dict[str, dict[str, Any]] = field(default_factory=dict)
    directory: Path | None = None
    prices: dict[str, dict[str, Any]] = field(default_factory=dict)

    def model(self, slug: str) -> dict[str, Any]:
        return _get(self.models, "model", slug)

    def system(self, slug: str) -> dict[str, Any]:
        return _get(self.systems, "system", slug)

    def tier_set(self, slug: str) -> dict[str, Any]:
        return _get(self.tier_sets, "tier set", slug)


def _get(entries: dict[str, dict[str, Any]], kind: str, slug: str) -> dict[str, Any]:
    try:
        return entries[slug]
    except KeyError:
        known = ", ".join(sorted(entries)) or "none"
        raise CatalogError(f"{kind} {slug!r} is not in the catalog (known: {known})") from None


def _check_figures(node: Any, where: str) -> None:
    """Every ``{value, ...}`` mapping below ``node`` with a value names its source."""
    if isinstance(node, dict) and "value" in node:
        figure_from(node, path=where)
    elif isinstance(node, dict):
        for key, value in node.items():
            _check_figures(value, f"{where}.{key}")


def _check_tier_set(entry: dict[str, Any], where: str) -> None:
    as_date(entry.get("effective_date"), path=f"{where}.effective_date")
    tiers = entry.get("tiers")
    if not isinstance(tiers, list) or not tiers:
        raise CatalogError(f"{where}: expected a non-empty list 'tiers'")
    for i, tier in enumerate(tiers):
        if not isinstance(tier, dict) or not tier.get("name"):
            raise CatalogError(f"{where}.tiers[{i}]: a tier needs a name")
        for key in ("min_p25_output_speed", "max_ttft_s"):
            value = tier.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise CatalogError(f"{where}.tiers[{i}].{key}: expected a number, got {value!r}")


def _check_tier_criterion(entry: dict[str, Any], where: str) -> None:
    criterion = entry.get("criterion", "requests")
    if criterion not in ("requests", "sessions"):
        raise CatalogError(f"{where}.criterion: expected requests or sessions, got {criterion!r}")
    share = entry.get("min_session_share", 0.95)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise CatalogError(f"{where}.min_session_share: expected a number in (0, 1], got {share!r}")


def _check_price(entry: dict[str, Any], where: str) -> None:
    if not entry.get("system"):
        raise CatalogError(f"{where}.system: a price names its hardware system")
    kind = entry.get("class")
    if kind not in PRICE_CLASSES:
        raise CatalogError(
            f"{where}.class: expected one of {', '.join(PRICE_CLASSES)}, got {kind!r}"
        )
    if as_date(entry.get("date"), path=f"{where}.date") is None:
        raise CatalogError(f"{where}.date: a price needs the date it was read")
    for name in PRICE_FIGURES[kind]:
        figure = entry.get(name)
        if not isinstance(figure, dict) or "value" not in figure:
            raise CatalogError(f"{where}.{name}: expected a figure {{value, source, note}}")
        value = figure["value"]
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0
        ):
            raise CatalogError(f"{where}.{name}: expected a positive number or null, got {value!r}")


def _entries(doc: Any, key: str, name: str) -> dict[str, dict[str, Any]]:
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        raise CatalogError(f"{name}: expected a top-level list {key!r}")
    out: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(doc[key]):
        if not isinstance(entry, dict) or not entry.get("slug"):
            raise CatalogError(f"{name}: {key}[{i}] has no slug")
        slug = str(entry["slug"])
        if slug in out:
            raise CatalogError(f"{name}: slug {slug!r} appears twice")
        where = f"{name}:{slug}"
        for field_name, value in entry.items():
            _check_figures(value, f"{where}.{field_name}")
        if key == "tier_sets":
            _check_tier_set(entry, where)
            _check_tier_criterion(entry, where)
        if key == "prices":
            _check_price(entry, where)
        out[slug] = entry
    return out


def catalog_dir(directory: str | Path | None = None) -> Path | None:
    """The directory asked for (argument, else AGENTPERF_CATALOG_DIR); None: as shipped."""
    if directory is not None:
        return Path(directory)
    env = os.environ.get(CATALOG_DIR_ENV)
    return Path(env) if env else None


def _read(base: Traversable, name: str) -> Any:
    file = base / name
    if not file.is_file():
        raise CatalogError(f"catalog file {file} not found")
    try:
        return yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise CatalogError(f"{name}: {exc}") from exc


def load_catalog(directory: str | Path | None = None) -> Catalog:
    """Read and check the three catalog files from ``directory`` (default: as shipped)."""
    chosen = catalog_dir(directory)
    base: Traversable = chosen if chosen is not None else files(__name__)
    loaded = {key: _entries(_read(base, name), key, name) for key, name in FILES.items()}
    prices: dict[str, dict[str, Any]] = {}
    if (base / PRICES_FILE).is_file():
        prices = _entries(_read(base, PRICES_FILE), "prices", PRICES_FILE)
        for slug, entry in prices.items():
            if entry["system"] not in loaded["systems"]:
                raise CatalogError(
                    f"{PRICES_FILE}:{slug}.system: unknown hardware system {entry['system']!r}"
                )
    return Catalog(
        models=loaded["models"],
        systems=loaded["systems"],
        tier_sets=loaded["tier_sets"],
        directory=chosen or DEFAULT_CATALOG_DIR,
        prices=prices,
    )


def lookup(entry: dict[str, Any], dotted: str) -> Any:
    """``lookup(system, "peak_tflops_dense.fp4")`` → the raw figure mapping, or None."""
    node: Any = entry
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node
