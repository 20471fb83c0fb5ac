"""A ladder's spec (docs/engine.md "ladder"): the file, parsed and checked, with every
error naming its field. The command is ``python -m agentperf.engine ladder --steps LADDER.yaml
--out DIR`` (``agentperf.ladder.cli``); the rungs are planned in ``agentperf.ladder.plan``,
measured in ``agentperf.ladder.measure`` and attributed in ``agentperf.ladder.attribute``.

A ladder is a baseline plus an ordered list of named changes. Rung 0 is the baseline; rung
*i* is the baseline with changes 1…i applied. Every rung is measured under the same
conditions (dataset, tiers, seed, trial plan), and each change is credited with the
difference between its rung and the one before, at each evaluated speed, with bootstrap
intervals by agent session.

A rung's target is an endpoint (``http://…/v1``, the vendor redeploys between rungs) or
``sim:PROFILE`` plus a JSON Merge Patch (RFC 7396) of the profile per change, so a what-if
runs on the simulator in virtual time. YAML::

    name: gb300-oct08-to-oct28
    baseline: {name: 8 Oct stack, target: "sim:gb300-nvl72-dsv41-flash-oct08"}
    steps:
      - name: FlashInfer autotuning
        description: attention kernels autotuned
        patch: {deployment: {attention: {efficiency: 0.18}}}
      - ...
    dataset: {generate: {seed: 1, trajectories: 200}}   # or {path: FILE}; output_kind: prose
                                                        # generate.shape: decode-heavy (docs/datasets.md)
    tiers: agentperf-default-v1                         # a catalog set, a JSON file or a list
    speeds: [220, 82]                                   # besides every tier's speed
    trials: {concurrencies: [1, 256, 1024], warmup_s: 30, duration_s: 60, ramp_s: 15}
    #   or  {search: {cap: 1024, max_trials: 12}, ...}
    orders: [forward, reverse, leave_one_out]
    bootstrap: {resamples: 200, confidence: 0.95}
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from agentperf.catalog_data import CatalogError, load_catalog
from agentperf.engine.datasets.synthetic import SHAPES
from agentperf.engine.trial import Tier, parse_tiers
from agentperf.simulator.profile import OUTPUT_KINDS, ProfileError

ORDERS = ("forward", "reverse", "leave_one_out")
DEFAULT_RESAMPLES = 200
DEFAULT_CONFIDENCE = 0.95


class LadderError(ValueError):
    """A ladder file that cannot run; the message names the field (``steps[2].patch``)."""


# ---------------------------------------------------------------------------- the spec


@dataclass(slots=True, frozen=True)
class Change:
    name: str
    description: str
    patch: dict[str, Any] | None = None  # merge patch of the sim profile
    target: str | None = None  # a new endpoint (or sim:PROFILE) from this rung on
    dataset: dict[str, Any] | None = None  # a new dataset from this rung on


@dataclass(slots=True, frozen=True)
class TrialPlan:
    concurrencies: tuple[int, ...] = ()
    search_cap: int | None = None
    search_max_trials: int = 12
    warmup_s: float = 30.0
    duration_s: float = 60.0
    ramp_s: float = 15.0
    min_requests: int = 20
    # fixed concurrencies: stop after the first trial slower than this (tok/s per agent)
    stop_below: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class LadderSpec:
    name: str
    description: str
    baseline_name: str
    baseline_description: str
    baseline_target: str
    baseline_patch: dict[str, Any] | None
    steps: list[Change]
    dataset: dict[str, Any]
    tiers: list[Tier]
    tier_set: str
    speeds: list[float]
    trials: TrialPlan
    seed: int = 0
    orders: list[str] = field(default_factory=lambda: ["forward"])
    resamples: int = DEFAULT_RESAMPLES
    confidence: float = DEFAULT_CONFIDENCE
    model: str | None = None
    accelerators: int | None = None
    api_key: str | None = None
    base_dir: Path = Path(".")
    # Band samples (docs/simulator.md "Bands"): (name, merge patch of the baseline
    # profile); every rung is measured again under each, and each share gets a band.
    band: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def evaluated_speeds(self) -> list[tuple[float, str]]:
        """(speed, why) for every tier speed and every asked speed, fastest first."""
        out: dict[float, str] = {}
        for t in self.tiers:
            out.setdefault(float(t.min_p25_output_speed), f"tier {t.name}")
        for s in self.speeds:
            out.setdefault(float(s), "asked")
        return sorted(out.items(), key=lambda kv: -kv[0])


def _str(value: Any, where: str, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise LadderError(f"{where}: expected a non-empty string")
    return value


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise LadderError(f"{where}: expected a mapping")
    return value


def _check_keys(doc: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(doc) - allowed)
    if extra:
        raise LadderError(
            f"{where}.{extra[0]}: unknown key (allowed: {', '.join(sorted(allowed))})"
        )


def _dataset_spec(value: Any, where: str) -> dict[str, Any]:
    doc = _mapping(value, where)
    _check_keys(doc, {"path", "generate", "output_kind", "label"}, where)
    if ("path" in doc) == ("generate" in doc):
        raise LadderError(f"{where}: give exactly one of path or generate")
    if "generate" in doc:
        gen = _mapping(doc["generate"], f"{where}.generate")
        _check_keys(gen, {"seed", "trajectories", "shape"}, f"{where}.generate")
        for key in ("seed", "trajectories"):
            if not isinstance(gen.get(key, 0), int):
                raise LadderError(f"{where}.generate.{key}: expected an integer")
        if gen.get("shape", "coding") not in SHAPES:
            raise LadderError(f"{where}.generate.shape: one of {', '.join(SHAPES)}")
    if "output_kind" in doc:
        if doc["output_kind"] not in OUTPUT_KINDS:
            raise LadderError(f"{where}.output_kind: one of {', '.join(OUTPUT_KINDS)}")
    return dict(doc)


def _tiers(value: Any, base_dir: Path) -> tuple[list[Tier], str]:
    if isinstance(value, str) and not value.endswith(".json"):
        try:
            tier_set = load_catalog().tier_set(value)
        except CatalogError as exc:
            raise LadderError(f"tiers: {exc}; or give a JSON file") from None
        # the set's criterion applies to each of its tiers, as the platform's run spec carries
        # it (docs/engine.md "Session SLOs", docs/catalog.md "SLO tier sets")
        set_rule = {
            key: tier_set[key] for key in ("criterion", "min_session_share") if key in tier_set
        }
        return parse_tiers([{**tier, **set_rule} for tier in tier_set["tiers"]]), value
    if isinstance(value, str):
        path = (base_dir / value) if not os.path.isabs(value) else Path(value)
        try:
            return parse_tiers(orjson.loads(path.read_bytes())), str(value)
        except FileNotFoundError:
            raise LadderError(f"tiers: file not found: {value}") from None
        except ValueError as exc:
            raise LadderError(f"tiers: {exc}") from None
    try:
        return parse_tiers(value), "inline"
    except (ValueError, TypeError) as exc:
        raise LadderError(f"tiers: {exc}") from None


def _patch(value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise LadderError(f"{where}: a JSON Merge Patch must be a mapping")
    return value


def parse_ladder(doc: Any, *, base_dir: Path | str = ".") -> LadderSpec:
    """A ladder from its YAML document; LadderError names the field at fault."""
    base = Path(base_dir)
    doc = _mapping(doc, "ladder")
    _check_keys(
        doc,
        {
            "name",
            "description",
            "baseline",
            "steps",
            "dataset",
            "tiers",
            "speeds",
            "trials",
            "seed",
            "orders",
            "bootstrap",
            "model",
            "accelerators",
            "simulated",
            "band",
        },
        "ladder",
    )
    name = _str(doc.get("name"), "name")
    bl = _mapping(doc.get("baseline"), "baseline")
    _check_keys(bl, {"name", "description", "target", "patch"}, "baseline")
    target = _str(bl.get("target"), "baseline.target")
    steps_raw = doc.get("steps")
    if not isinstance(steps_raw, list) or not steps_raw:
        raise LadderError("steps: expected a non-empty list of changes")
    steps: list[Change] = []
    seen: set[str] = set()
    for i, raw in enumerate(steps_raw):
        where = f"steps[{i}]"
        s = _mapping(raw, where)
        _check_keys(s, {"name", "description", "patch", "target", "dataset"}, where)
        step_name = _str(s.get("name"), f"{where}.name")
        if step_name in seen:
            raise LadderError(f"{where}.name: {step_name!r} is already a step's name")
        seen.add(step_name)
        description = _str(s.get("description"), f"{where}.description")
        if "\n" in description.strip():
            raise LadderError(f"{where}.description: one line")
        patch = _patch(s.get("patch"), f"{where}.patch")
        step_target = s.get("target")
        if step_target is not None:
            _str(step_target, f"{where}.target")
        dataset = _dataset_spec(s["dataset"], f"{where}.dataset") if "dataset" in s else None
        if patch is None and step_target is None and dataset is None:
            raise LadderError(f"{where}: a change needs a patch, a target or a dataset")
        steps.append(Change(step_name, description.strip(), patch, step_target, dataset))
    if "dataset" not in doc:
        raise LadderError("dataset: required (path: FILE or generate: {seed, trajectories})")
    tiers, tier_set = _tiers(doc.get("tiers", "agentperf-default-v1"), base)
    speeds_raw = doc.get("speeds") or []
    if not isinstance(speeds_raw, list) or not all(
        isinstance(x, int | float) and x > 0 for x in speeds_raw
    ):
        raise LadderError("speeds: expected a list of positive numbers (tok/s per agent)")
    trials = _trial_plan(doc.get("trials") or {})
    orders = doc.get("orders", ["forward"])
    if isinstance(orders, str):
        orders = [orders]
    if not isinstance(orders, list) or not orders or any(o not in ORDERS for o in orders):
        raise LadderError(f"orders: a list of {', '.join(ORDERS)}")
    boot = _mapping(doc.get("bootstrap") or {}, "bootstrap")
    _check_keys(boot, {"resamples", "confidence"}, "bootstrap")
    resamples = boot.get("resamples", DEFAULT_RESAMPLES)
    confidence = boot.get("confidence", DEFAULT_CONFIDENCE)
    if not isinstance(resamples, int) or resamples < 0:
        raise LadderError("bootstrap.resamples: a non-negative integer")
    if not isinstance(confidence, int | float) or not 0 < confidence < 1:
        raise LadderError("bootstrap.confidence: in (0, 1)")
    accelerators = doc.get("accelerators")
    if accelerators is not None and (not isinstance(accelerators, int) or accelerators < 1):
        raise LadderError("accelerators: a positive integer")
    seed = doc.get("seed", 0)
    if not isinstance(seed, int):
        raise LadderError("seed: an integer")
    spec = LadderSpec(
        name=name,
        description=_str(doc.get("description"), "description", required=False),
        baseline_name=_str(bl.get("name", "baseline"), "baseline.name"),
        baseline_description=_str(bl.get("description"), "baseline.description", required=False),
        baseline_target=target,
        baseline_patch=_patch(bl.get("patch"), "baseline.patch"),
        steps=steps,
        dataset=_dataset_spec(doc["dataset"], "dataset"),
        tiers=tiers,
        tier_set=tier_set,
        speeds=[float(x) for x in speeds_raw],
        trials=trials,
        seed=seed,
        orders=list(dict.fromkeys(orders)),
        resamples=resamples,
        confidence=float(confidence),
        model=doc.get("model"),
        accelerators=accelerators,
        base_dir=base,
    )
    if "band" in doc:
        spec.band = _band_spec(doc["band"], target)
    for i, change in enumerate(spec.steps):
        if change.patch is not None and not is_sim(change.target or _target_before(spec, i)):
            raise LadderError(
                f"steps[{i}].patch: a patch applies to a sim:PROFILE target; on an endpoint "
                "the change is the new deployment (give its target)"
            )
    if not is_sim(target) and (spec.model is None or spec.accelerators is None):
        raise LadderError("model and accelerators: required when a target is an endpoint")
    return spec


def _band_spec(value: Any, target: str) -> list[tuple[str, dict[str, Any]]]:
    """``band: open`` (the baseline profile's open parameters, each end of each range and
    each alternative) or ``band: {samples: [{name, patch}, …]}`` (merge patches of the
    baseline profile). Only on a sim:PROFILE baseline."""
    if not is_sim(target):
        raise LadderError("band: bands are for ladders on the twin (a sim:PROFILE baseline)")
    out: list[tuple[str, dict[str, Any]]] = []
    if value == "open":
        from agentperf.simulator.bands import open_patches

        try:
            out = open_patches(target[4:])
        except (ProfileError, ValueError) as exc:
            raise LadderError(f"band: {exc}") from None
        if not out:
            raise LadderError(f"band: profile {target[4:]} declares no open parameters")
        return out
    obj = _mapping(value, "band")
    _check_keys(obj, {"samples"}, "band")
    raw = obj.get("samples")
    if not isinstance(raw, list) or not raw:
        raise LadderError("band.samples: a non-empty list of {name, patch}")
    for i, item in enumerate(raw):
        m = _mapping(item, f"band.samples[{i}]")
        _check_keys(m, {"name", "patch"}, f"band.samples[{i}]")
        patch = _patch(m.get("patch"), f"band.samples[{i}].patch")
        if not patch:
            raise LadderError(f"band.samples[{i}].patch: required")
        out.append((_str(m.get("name"), f"band.samples[{i}].name"), patch))
    return out


def _trial_plan(value: Any) -> TrialPlan:
    doc = _mapping(value, "trials")
    _check_keys(
        doc,
        {
            "concurrencies",
            "search",
            "warmup_s",
            "duration_s",
            "ramp_s",
            "min_requests",
            "stop_below",
        },
        "trials",
    )
    conc = doc.get("concurrencies")
    search = doc.get("search")
    if (conc is None) == (search is None):
        raise LadderError("trials: give exactly one of concurrencies or search")
    kwargs: dict[str, Any] = {}
    if conc is not None:
        if (
            not isinstance(conc, list)
            or not conc
            or any(not isinstance(n, int) or n < 1 for n in conc)
        ):
            raise LadderError("trials.concurrencies: a list of positive integers")
        kwargs["concurrencies"] = tuple(sorted(set(conc)))
    else:
        sd = _mapping(search, "trials.search")
        _check_keys(sd, {"cap", "max_trials"}, "trials.search")
        cap, mt = sd.get("cap", 1024), sd.get("max_trials", 12)
        if not isinstance(cap, int) or cap < 1:
            raise LadderError("trials.search.cap: a positive integer")
        if not isinstance(mt, int) or mt < 1:
            raise LadderError("trials.search.max_trials: a positive integer")
        kwargs["search_cap"], kwargs["search_max_trials"] = cap, mt
    for key in ("warmup_s", "duration_s", "ramp_s"):
        if key in doc:
            v = doc[key]
            if not isinstance(v, int | float) or v < 0 or (key == "duration_s" and v <= 0):
                raise LadderError(f"trials.{key}: a non-negative number of seconds")
            kwargs[key] = float(v)
    if "min_requests" in doc:
        if not isinstance(doc["min_requests"], int) or doc["min_requests"] < 1:
            raise LadderError("trials.min_requests: a positive integer")
        kwargs["min_requests"] = doc["min_requests"]
    if doc.get("stop_below") is not None:
        if not isinstance(doc["stop_below"], int | float) or doc["stop_below"] <= 0:
            raise LadderError("trials.stop_below: a positive speed, tok/s per agent")
        kwargs["stop_below"] = float(doc["stop_below"])
    return TrialPlan(**kwargs)


def load_ladder(path: str | os.PathLike[str]) -> LadderSpec:
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise LadderError(f"ladder file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise LadderError(f"{path}: not valid YAML: {exc}") from None
    return parse_ladder(doc, base_dir=p.parent)


def is_sim(target: str) -> bool:
    return target.startswith("sim:")


def _target_before(spec: LadderSpec, index: int) -> str:
    target = spec.baseline_target
    for change in spec.steps[:index]:
        target = change.target or target
    return target
