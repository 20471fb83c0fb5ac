"""Simulator profiles: a catalog system + a catalog model + a deployment, every number sourced.

A profile is a YAML file (see ``agentperf/simulator/profiles/`` and ``docs/simulator.md``)::

    name: gb300-nvl72-dsv41flash
    system: gb300-nvl72              # catalog slug, or an inline mapping of figures
    model: deepseek-v4.1-flash-max   # catalog slug, or an inline mapping of figures
    catalog_overrides:               # figures the catalog leaves null (or that this profile
      system: {peak_tflops_dense: {fp4: {value: 15000, source: https://..., note: ...}}}
    deployment: {...}                # precision, roles, batching, caching, speculation, ...
    sources:                         # every numeric deployment leaf: URL or "assumption: why"
      deployment.efficiency: "assumption: ..."

Loading refuses a profile whose figures are missing or unsourced, with the path to fix.

This module finds, reads, patches and builds profiles. What a built profile is:
``agentperf.simulator.profile_types`` (``Profile``); the document's shape:
``agentperf.simulator.profile_schema`` (``ProfileDocument``); where its numbers come from:
``agentperf.simulator.profile_figures``. The names callers use are importable from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agentperf.catalog_data import Catalog
from agentperf.mergepatch import merge_patch, patch_paths
from agentperf.simulator.profile_figures import (
    CatalogSource,
    deployment_provenance,
    resolve_figures,
)
from agentperf.simulator.profile_schema import parse_profile_document
from agentperf.simulator.profile_types import Profile, ProfileError

__all__ = [
    "OVERRIDE_SOURCE",
    "PROFILES_DIR",
    "Profile",
    "ProfileError",
    "available_profiles",
    "load_profile",
    "load_profile_with",
    "profile_document",
    "profile_from_dict",
    "repo_relative",
    "resolve_profile_path",
]

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"


def repo_relative(path: Path) -> str:
    """``path`` relative to the repository (the profiles' records name their files so);
    as given when it lies outside it."""
    root = PROFILES_DIR.parent.parent.parent
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


def resolve_profile_path(profile: str | Path) -> Path:
    """A profile name (file in ``agentperf/simulator/profiles/``) or a path."""
    p = Path(profile)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return p
    for candidate in (PROFILES_DIR / f"{profile}.yaml", PROFILES_DIR / f"{profile}.yml"):
        if candidate.is_file():
            return candidate
    if p.is_file():
        return p
    known = ", ".join(available_profiles()) or "none"
    raise ProfileError(f"profile {str(profile)!r} not found (a path, or one of: {known})")


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def load_profile(
    profile: str | Path, *, catalog: Catalog | None = None, catalog_dir: str | Path | None = None
) -> Profile:
    """Load and validate a profile; the catalog is read only if the profile names slugs."""
    path = resolve_profile_path(profile)
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML: {exc}") from exc
    return profile_from_dict(doc, path=path, catalog=catalog, catalog_dir=catalog_dir)


OVERRIDE_SOURCE = "the deployment config's override (launcher.simulated.overrides): a what-if"


def profile_document(
    profile: str | Path, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The profile's YAML document with its ``deployment`` section patched by ``overrides``
    (a JSON Merge Patch, RFC 7396; docs/simulator.md "Overrides"). The patch reaches only
    ``deployment``: what the profile simulates (system, model, served names) stays."""
    path = resolve_profile_path(profile)
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise ProfileError(f"{path}: expected a mapping")
    if overrides:
        if not isinstance(overrides, dict):
            raise ProfileError("overrides: a JSON Merge Patch (a mapping) of deployment")
        # a profile refuses unsourced figures: each overridden one is sourced by the override
        sources = dict(doc.get("sources") or {})
        for leaf in patch_paths(overrides):
            sources.setdefault(f"deployment.{leaf}", OVERRIDE_SOURCE)
        doc = {
            **doc,
            "deployment": merge_patch(doc.get("deployment"), overrides),
            "sources": sources,
        }
    return doc


def load_profile_with(profile: str | Path, overrides: dict[str, Any] | None = None) -> Profile:
    """``load_profile`` with ``overrides`` applied to the ``deployment`` section first; a
    patched value that does not fit is a ProfileError naming its field."""
    if not overrides:
        return load_profile(profile)
    doc = profile_document(profile, overrides)
    return profile_from_dict(doc, path=resolve_profile_path(profile))


def profile_from_dict(
    doc: Any,
    *,
    path: Path | None = None,
    catalog: Catalog | None = None,
    catalog_dir: str | Path | None = None,
) -> Profile:
    """A profile from its document (the YAML's mapping): the document parsed
    (``ProfileDocument``), its figures taken from the catalog or inline, every deployment
    number sourced, and the whole checked (``check_profile``). ``path``: the file, named in
    the document's own refusals; ``catalog``/``catalog_dir``: where slugs are looked up."""
    document = parse_profile_document(doc, str(path) if path else "profile")
    figures = resolve_figures(document, CatalogSource(catalog, catalog_dir))
    provenance = figures.provenance()
    provenance.update(deployment_provenance(doc["deployment"], document.sources))
    open_section = document.open
    prof = Profile(
        name=document.name,
        label=str(document.label or document.name),
        path=path,
        system_slug=figures.system_slug,
        model_slug=figures.model_slug,
        served_model_names=tuple(document.served_model_names or [figures.model_slug]),
        systems=document.systems,
        **figures.profile_fields(document),
        **document.deployment.profile_fields(),
        provenance=provenance,
        open_parameters=open_section.open_parameters() if open_section else (),
        fit_from=document.fit_from.fit_from() if document.fit_from else None,
        open_treatment=open_section.treatment if open_section else "envelope",
    )
    check_profile(prof)
    return prof


def check_profile(p: Profile) -> None:
    """What no one figure says alone: the model's active parameters within its total, the
    deployment within the system, the weights within each replica's memory, speculation's
    acceptance and decay and the idle power share within their ranges."""
    if p.active_decode_b > p.total_params_b or p.active_prefill_b > p.total_params_b:
        raise ProfileError("model: active parameters exceed total parameters")
    if p.accelerators_used > p.accelerators_total:
        raise ProfileError(
            f"deployment uses {p.accelerators_used} accelerators but {p.systems} × "
            f"{p.system_slug} has {p.accelerators_total}"
        )
    for r in p.roles:
        if p.kv_capacity_tokens(r) <= 0:
            raise ProfileError(
                f"deployment.{r.role}: weights ({p.weight_bytes / 1e9:.0f} GB) do not fit in "
                f"{r.accelerators} × {p.memory_gb:g} GB after the memory reserve"
            )
    if p.spec_k and not 0.0 <= p.spec_acceptance <= 1.0:
        raise ProfileError("deployment.speculative.acceptance: between 0 and 1")
    if not 0.0 < p.spec_position_decay <= 1.0:
        raise ProfileError("deployment.speculative.position_decay: in (0, 1]")
    if p.power_idle_fraction > 1.0:
        raise ProfileError("deployment.power.idle_fraction: at most 1")
