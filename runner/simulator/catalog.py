"""A small, pure loader for the catalog files the simulator reads (no Django).

The catalog (``runner/catalog/models.yaml`` and ``hardware.yaml``) stores every figure as
``{value: X | null, source: URL, note: str}``. The simulator needs plain numbers plus the
source of each, so this module unwraps figures and keeps their provenance beside them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


DEFAULT_CATALOG_DIR = Path(__file__).resolve().parents[1] / "catalog"
CATALOG_DIR_ENV = "AGENTPERF_CATALOG_DIR"


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
        raise CatalogError(f"{path}: figure has a value but no source")
    return Figure(value=raw["value"], source=str(source), note=str(raw.get("note") or ""))


@dataclass(slots=True, frozen=True)
class Catalog:
    models: dict[str, dict[str, Any]]
    systems: dict[str, dict[str, Any]]
    directory: Path | None = None

    def model(self, slug: str) -> dict[str, Any]:
        try:
            return self.models[slug]
        except KeyError:
            known = ", ".join(sorted(self.models)) or "none"
            raise CatalogError(f"model {slug!r} is not in the catalog (known: {known})") from None

    def system(self, slug: str) -> dict[str, Any]:
        try:
            return self.systems[slug]
        except KeyError:
            known = ", ".join(sorted(self.systems)) or "none"
            raise CatalogError(f"system {slug!r} is not in the catalog (known: {known})") from None


def _entries(doc: Any, key: str, path: Path) -> dict[str, dict[str, Any]]:
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        raise CatalogError(f"{path}: expected a top-level list {key!r}")
    out: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(doc[key]):
        if not isinstance(entry, dict) or not entry.get("slug"):
            raise CatalogError(f"{path}: {key}[{i}] has no slug")
        out[str(entry["slug"])] = entry
    return out


def catalog_dir(directory: str | Path | None = None) -> Path:
    if directory is not None:
        return Path(directory)
    env = os.environ.get(CATALOG_DIR_ENV)
    return Path(env) if env else DEFAULT_CATALOG_DIR


def load_catalog(directory: str | Path | None = None) -> Catalog:
    """Read ``models.yaml`` and ``hardware.yaml`` from ``directory`` (default: the repo's)."""
    base = catalog_dir(directory)
    models_path, hardware_path = base / "models.yaml", base / "hardware.yaml"
    for p in (models_path, hardware_path):
        if not p.is_file():
            raise CatalogError(f"catalog file {p} not found")
    models = _entries(yaml.safe_load(models_path.read_text()), "models", models_path)
    systems = _entries(yaml.safe_load(hardware_path.read_text()), "systems", hardware_path)
    return Catalog(models=models, systems=systems, directory=base)


def lookup(entry: dict[str, Any], dotted: str) -> Any:
    """``lookup(system, "peak_tflops_dense.fp4")`` → the raw figure mapping, or None."""
    node: Any = entry
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node
