"""A ladder's rungs (docs/engine.md "ladder"): for each order, the rungs it measures, each
with the config that decides its measurement (the patched profile, the target, the dataset)
and that config's digest, so a rung measured once is reused.

forward: baseline, +1, +1+2, …; reverse: baseline, +n, +n+(n−1), …; leave_one_out:
baseline, all changes, and all but each change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import yaml

from agentperf.ladder.document import is_sim
from agentperf.ladder.spec import LadderError, LadderSpec
from agentperf.mergepatch import merge_patch, patch_paths
from agentperf.simulator.profile import ProfileError, profile_from_dict, resolve_profile_path


@dataclass(slots=True)
class RungConfig:
    """What one rung runs: everything that decides its measurement (its digest)."""

    target: str  # sim:PROFILE or a base URL
    profile_doc: dict[str, Any] | None  # the patched profile (sim targets)
    dataset: dict[str, Any]

    def digest(self, spec: LadderSpec) -> str:
        doc = {
            "target": None if self.profile_doc is not None else self.target,
            "profile": self.profile_doc,
            "dataset": self.dataset,
            "tiers": [t.to_dict() for t in spec.tiers],
            "seed": spec.seed,
            "trials": spec.trials.to_dict(),
            "speeds": [s for s, _ in spec.evaluated_speeds()],
            "model": spec.model,
            "accelerators": spec.accelerators,
            "bootstrap": [spec.resamples, spec.confidence],
        }
        return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(slots=True)
class RungPlan:
    name: str
    description: str
    change: int | None  # index into spec.steps of the change this rung adds (None: baseline)
    applied: tuple[int, ...]  # indices of the changes applied, in order
    config: RungConfig
    digest: str


def _profile_doc(profile: str) -> dict[str, Any]:
    try:
        path = resolve_profile_path(profile)
    except ProfileError as exc:
        raise LadderError(f"baseline.target: {exc}") from None
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict):
        raise LadderError(f"baseline.target: profile {profile} is not a mapping")
    return doc


def _with_sources(doc: dict[str, Any], patch: dict[str, Any], label: str) -> dict[str, Any]:
    """Every deployment leaf a change sets is sourced by the change itself (a profile
    refuses unsourced figures): "ladder change NAME: DESCRIPTION"."""
    sources = dict(doc.get("sources") or {})
    own = patch.get("sources") or {}
    for path in patch_paths({k: v for k, v in patch.items() if k != "sources"}):
        if path.startswith("deployment.") and path not in own:
            sources[path] = label
    out = dict(doc)
    out["sources"] = sources
    return out


def build_rung(spec: LadderSpec, applied: Sequence[int], where: str) -> RungConfig:
    """The rung with the changes ``applied`` (indices into spec.steps, in that order)."""
    target = spec.baseline_target
    dataset = spec.dataset
    doc: dict[str, Any] | None = None
    if is_sim(target):
        doc = _profile_doc(target[4:])
        if spec.baseline_patch:
            doc = merge_patch(doc, spec.baseline_patch)
            doc = _with_sources(doc, spec.baseline_patch, f"ladder baseline {spec.baseline_name}")
    for i in applied:
        change = spec.steps[i]
        if change.target is not None:
            target = change.target
            doc = _profile_doc(target[4:]) if is_sim(target) else None
        if change.dataset is not None:
            dataset = change.dataset
        if change.patch is not None:
            if doc is None:
                raise LadderError(f"steps[{i}].patch: the target at this rung is an endpoint")
            label = f"ladder change {change.name!r}: {change.description}"
            doc = _with_sources(merge_patch(doc, change.patch), change.patch, label)
    if doc is not None:
        try:
            profile_from_dict(doc)
        except ProfileError as exc:
            raise LadderError(f"{where}: the patched profile is not valid: {exc}") from None
    return RungConfig(target=target, profile_doc=doc, dataset=dataset)


def plan_rungs(spec: LadderSpec, order: str) -> list[RungPlan]:
    """The rungs of one order. forward: baseline, +1, +1+2, …; reverse: baseline, +n,
    +n+(n−1), …; leave_one_out: baseline, all, and all but each change."""
    n = len(spec.steps)
    out: list[RungPlan] = []

    def add(name: str, desc: str, change: int | None, applied: Sequence[int], where: str) -> None:
        config = build_rung(spec, applied, where)
        out.append(RungPlan(name, desc, change, tuple(applied), config, config.digest(spec)))

    add(spec.baseline_name, spec.baseline_description, None, (), "baseline")
    if order in ("forward", "reverse"):
        indices = list(range(n)) if order == "forward" else list(range(n - 1, -1, -1))
        for k, i in enumerate(indices):
            step = spec.steps[i]
            add(step.name, step.description, i, indices[: k + 1], f"steps[{i}]")
    elif order == "leave_one_out":
        everything = list(range(n))
        add("all changes", "every change applied", None, everything, "all changes")
        for i, step in enumerate(spec.steps):
            rest = [j for j in everything if j != i]
            add(f"all but {step.name}", step.description, i, rest, f"steps[{i}] left out")
    else:
        raise LadderError(f"orders: unknown order {order!r}")
    return out
