"""Where a profile's numbers come from (docs/simulator.md "Profiles and the source of every
number"): the system's and the model's figures from the catalog (by slug) or inline, with
the profile's sourced ``catalog_overrides``, and a source under ``sources`` for every number
of the deployment. ``agentperf.simulator.profile`` builds the ``Profile`` from them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentperf.catalog_data import Catalog, CatalogError, Figure, figure_from, load_catalog
from agentperf.simulator.profile_schema import ProfileDocument, number_problem
from agentperf.simulator.profile_types import ProfileError

SYSTEM_FIGURES = ("accelerators_per_system", "memory_gb_per_accelerator", "hbm_bandwidth_tb_s")
MODEL_FIGURES = (
    "total_params_b",
    "active_params_prefill_b",
    "active_params_decode_b",
    "context_length",
    "kv_bytes_per_token",
    "weight_bits",
)


def profile_number(value: Any, where: str, *, minimum: float = 0.0) -> float:
    """``value`` as a profile number of at least ``minimum``; a ProfileError at ``where``."""
    problem = number_problem(value, minimum=minimum)
    if problem is not None:
        raise ProfileError(f"{where}: {problem}")
    return float(value)


def dig(obj: Any, dotted: str) -> Any:
    """The value at a dotted path of nested mappings (None where there is none)."""
    node = obj
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


@dataclass
class CatalogSource:
    """The catalog a profile's slugs are looked up in: the one given, or the one in
    ``catalog_dir`` (the repository's when None), read only when a slug asks for it."""

    catalog: Catalog | None = None
    catalog_dir: str | Path | None = None
    _loaded: Catalog | None = field(default=None, repr=False)

    def get(self) -> Catalog:
        if self.catalog is not None:
            return self.catalog
        if self._loaded is None:
            try:
                self._loaded = load_catalog(self.catalog_dir)
            except CatalogError as exc:
                raise ProfileError(str(exc)) from exc
        return self._loaded


def _figure(kind: str, name: str, override: Any) -> Figure:
    """A figure the profile supplies under ``catalog_overrides``: a value and a source."""
    try:
        fig = figure_from(override, path=f"catalog_overrides.{kind}.{name}")
    except CatalogError as exc:
        raise ProfileError(str(exc)) from exc
    if fig.value is None or not fig.source.strip():
        raise ProfileError(
            f"catalog_overrides.{kind}.{name}: an override needs a value and a source"
        )
    return fig


def _entry_figure(kind: str, name: str, entry: Any, origin: str) -> Figure:
    """A figure of the catalog's (or the inline) entry; refused when it has no value."""
    raw = dig(entry, name)
    if raw is None or (isinstance(raw, dict) and raw.get("value") is None):
        raise ProfileError(
            f"{origin} has no value for {name!r}; supply it under "
            f"catalog_overrides.{kind}.{name} as {{value, source, note}}"
        )
    if not isinstance(raw, dict):  # a bare scalar in the catalog (e.g. a count): keep it
        return Figure(value=raw, source=origin, note="bare catalog value")
    try:
        return figure_from(raw, path=f"{origin}.{name}")
    except CatalogError as exc:
        raise ProfileError(str(exc)) from exc


def resolve_entry(
    kind: str,
    ref: str | dict[str, Any],
    names: tuple[str, ...],
    overrides: Any,
    catalog_entry: Callable[[str], Any],
) -> tuple[str, dict[str, Figure]]:
    """Figures of a system or model: from the catalog (by slug) or inline, then overrides."""
    if isinstance(ref, str):
        try:
            entry = catalog_entry(ref)
        except CatalogError as exc:
            raise ProfileError(f"{kind}: {exc}") from exc
        slug, origin = ref, f"catalog {kind} {ref!r}"
    else:
        entry, slug, origin = ref, str(ref["slug"]), f"inline {kind}"
    figures: dict[str, Figure] = {}
    for name in names:
        override = dig(overrides, name)
        if override is not None:
            figures[name] = _figure(kind, name, override)
        else:
            figures[name] = _entry_figure(kind, name, entry, origin)
    return slug, figures


@dataclass(frozen=True)
class Figures:
    """The system's and the model's figures a profile uses, each with its source."""

    system_slug: str
    system: dict[str, Figure]
    model_slug: str
    model: dict[str, Figure]

    def system_number(self, name: str, minimum: float = 0.0) -> float:
        return profile_number(self.system[name].value, f"system.{name}", minimum=minimum)

    def model_number(self, name: str, minimum: float = 0.0) -> float:
        return profile_number(self.model[name].value, f"model.{name}", minimum=minimum)

    def profile_fields(self, document: ProfileDocument) -> dict[str, Any]:
        """The ``Profile`` fields the figures give: the accelerator's, the model's, and the
        weight bits when the deployment gives none."""
        dep = document.deployment
        return {
            "accelerators_per_system": int(self.system_number("accelerators_per_system", 1)),
            "memory_gb": self.system_number("memory_gb_per_accelerator", 1e-9),
            "hbm_tb_s": self.system_number("hbm_bandwidth_tb_s", 1e-9),
            "peak_tflops": self.system_number(f"peak_tflops_dense.{dep.precision}", 1e-9),
            "power_tdp_w": self.system_number("accelerator_power_w", 1e-9) if dep.power else None,
            "total_params_b": self.model_number("total_params_b", 1e-9),
            "active_prefill_b": self.model_number("active_params_prefill_b", 1e-9),
            "active_decode_b": self.model_number("active_params_decode_b", 1e-9),
            "context_length": int(self.model_number("context_length", 1)),
            "kv_bytes_per_token": self.model_number("kv_bytes_per_token", 1e-9),
            "weight_bits": (
                self.model_number("weight_bits", 1) if dep.weight_bits is None else dep.weight_bits
            ),
        }

    def provenance(self) -> dict[str, str]:
        """Each figure's source (and note), by ``system.<name>`` / ``model.<name>``."""
        out: dict[str, str] = {}
        for kind, figures in (("system", self.system), ("model", self.model)):
            for name, fig in figures.items():
                out[f"{kind}.{name}"] = fig.source + (f" ({fig.note})" if fig.note else "")
        return out


def resolve_figures(document: ProfileDocument, catalog: CatalogSource) -> Figures:
    """The figures ``document`` needs, from the catalog or inline, overrides first."""
    dep = document.deployment
    overrides = document.catalog_overrides
    system_names: tuple[str, ...] = (*SYSTEM_FIGURES, f"peak_tflops_dense.{dep.precision}")
    if dep.power:  # modelled power needs the accelerator's TDP (catalog or a sourced override)
        system_names = (*system_names, "accelerator_power_w")
    system_slug, system = resolve_entry(
        "system",
        document.system,
        system_names,
        overrides.system or {},
        lambda slug: catalog.get().system(slug),
    )
    model_names = MODEL_FIGURES if dep.weight_bits is None else MODEL_FIGURES[:-1]
    model_slug, model = resolve_entry(
        "model",
        document.model,
        model_names,
        overrides.model or {},
        lambda slug: catalog.get().model(slug),
    )
    return Figures(system_slug, system, model_slug, model)


def numeric_leaves(obj: Any, prefix: str) -> list[str]:
    """The dotted paths of every number (not boolean) in nested mappings, in their order."""
    if isinstance(obj, dict):
        out: list[str] = []
        for k, v in obj.items():
            out.extend(numeric_leaves(v, f"{prefix}.{k}"))
        return out
    if isinstance(obj, int | float) and not isinstance(obj, bool):
        return [prefix]
    return []


def source_for(path: str, sources: dict[str, str]) -> str | None:
    """The source of ``path``: its own entry, or that of the nearest section above it."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        key = ".".join(parts[:i])
        if key in sources:
            return sources[key]
    return None


def deployment_provenance(deployment: Any, sources: dict[str, str]) -> dict[str, str]:
    """The source of every number of the document's ``deployment`` mapping, in its order;
    refused, naming them, when some have none (a URL or a stated assumption)."""
    leaves = numeric_leaves(deployment, "deployment")
    missing = [leaf for leaf in leaves if source_for(leaf, sources) is None]
    if missing:
        raise ProfileError(
            "deployment parameters without a source or assumption under `sources`: "
            + ", ".join(missing)
        )
    return {leaf: source_for(leaf, sources) or "" for leaf in leaves}
