"""Ladders: which change bought the speed-up (docs/engine.md "ladder"); the command is
``python -m runner.engine ladder --steps LADDER.yaml --out DIR`` (``runner.ladder.cli``).

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
    tiers: agentperf-default-v1                         # a catalog set, a JSON file or a list
    speeds: [220, 82]                                   # besides every tier's speed
    trials: {concurrencies: [1, 256, 1024], warmup_s: 30, duration_s: 60, ramp_s: 15}
    #   or  {search: {cap: 1024, max_trials: 12}, ...}
    orders: [forward, reverse, leave_one_out]
    bootstrap: {resamples: 200, confidence: 0.95}

Attribution (``attribute``): on each rung's frontier (the Pareto frontier of its trials
that meet the TTFT and error limits of the tier the speed falls in), throughput per
accelerator at speed *s* is interpolated linearly between neighbours as the compare page
does (``runner.engine.frontier``); a speed slower than every frontier point reads the
slowest point's throughput, flagged ``floor`` (the rung never got that slow: saturated or
capped, so it serves *at least* that much there); a speed faster than every point has no
value. Each bootstrap resample draws every trial's agent sessions with replacement (each
rung's trials independently) and recomputes the same chain, so a change's gain and share
come with percentile intervals; a gain whose interval holds 0 is ``within_noise``.

Order matters: a change's gain is measured on top of the changes before it. ``reverse``
applies the changes last-first; ``leave_one_out`` credits each change with the full
ladder's value minus the full ladder without it (those credits need not add up: the
remainder is the changes' interaction).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from runner.catalog import CatalogError, load_catalog
from runner.engine.frontier import Point, pareto_frontier, throughput_at_speed
from runner.engine.metrics import NS, RequestRecord, attributed_tokens
from runner.engine.replay import ReplayConfig
from runner.engine.runs import Target, config_for_trial, run_on_target, search_job
from runner.engine.stats import group_by_session
from runner.engine.trajectory import DatasetError, load_dataset, with_output_kind
from runner.engine.trial import Tier, TrialConfig, parse_tiers, run_trial
from runner.ladder.report import ladder_html
from runner.mergepatch import merge_patch, overlapping, patch_paths
from runner.simulator.profile import (
    OUTPUT_KINDS,
    ProfileError,
    profile_from_dict,
    resolve_profile_path,
)
from runner.verification.speculative import (
    parse_metrics,
    prefix_cache_hit_rate,
    scrape_metrics,
    spec_figures,
    window_delta,
)

ORDERS = ("forward", "reverse", "leave_one_out")
DEFAULT_RESAMPLES = 200
DEFAULT_CONFIDENCE = 0.95
ORDER_NOTE = (
    "Order matters: each change is credited with the difference between its rung and the "
    "rung before it, i.e. measured on top of every change listed above it. A change that "
    "removes a bottleneck can look small before another change exposes that bottleneck, and "
    "large after. Compare the reverse order and leave-one-out credits before reading a "
    "share as the change's own worth."
)


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
        _check_keys(gen, {"seed", "trajectories"}, f"{where}.generate")
        for key in ("seed", "trajectories"):
            if not isinstance(gen.get(key, 0), int):
                raise LadderError(f"{where}.generate.{key}: expected an integer")
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
        return parse_tiers(tier_set["tiers"]), value
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
    for i, change in enumerate(spec.steps):
        if change.patch is not None and not _is_sim(change.target or _target_before(spec, i)):
            raise LadderError(
                f"steps[{i}].patch: a patch applies to a sim:PROFILE target; on an endpoint "
                "the change is the new deployment (give its target)"
            )
    if not _is_sim(target) and (spec.model is None or spec.accelerators is None):
        raise LadderError("model and accelerators: required when a target is an endpoint")
    return spec


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


def _is_sim(target: str) -> bool:
    return target.startswith("sim:")


def _target_before(spec: LadderSpec, index: int) -> str:
    target = spec.baseline_target
    for change in spec.steps[:index]:
        target = change.target or target
    return target


# ---------------------------------------------------------------------------- the rungs


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
    if _is_sim(target):
        doc = _profile_doc(target[4:])
        if spec.baseline_patch:
            doc = merge_patch(doc, spec.baseline_patch)
            doc = _with_sources(doc, spec.baseline_patch, f"ladder baseline {spec.baseline_name}")
    for i in applied:
        change = spec.steps[i]
        if change.target is not None:
            target = change.target
            doc = _profile_doc(target[4:]) if _is_sim(target) else None
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


# ---------------------------------------------------------------------------- measuring


@dataclass(slots=True)
class TrialMeasure:
    """One trial of a rung, with its bootstrap replicates (speed and throughput per resample
    drawn from the same sessions)."""

    index: int
    concurrency: int
    p25_speed: float
    throughput: float
    error_rate: float
    ttft_s: dict[str, float | None]
    requests: int
    sessions: int
    verdicts: dict[str, bool]
    server: dict[str, Any]
    speed_reps: list[float] = field(default_factory=list)
    throughput_reps: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> dict[str, Any]:
        """``to_dict`` with every non-finite number as None (JSON, PostgreSQL jsonb)."""
        out: dict[str, Any] = finite(self.to_dict())
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrialMeasure:
        """The inverse of ``to_dict``/``to_json`` (a None replicate is a resample without a
        value, NaN again)."""
        d = dict(d)
        for key in ("speed_reps", "throughput_reps"):
            d[key] = [math.nan if v is None else v for v in d.get(key) or []]
        return cls(**d)

    def feasible(self, tier: Tier | None) -> bool:
        """Meets the TTFT and error limits of ``tier`` (its speed is the frontier's x)."""
        if tier is None:
            return True
        ttft = self.ttft_s.get(f"p{tier.ttft_percentile:g}")
        ttft_ok = ttft is not None and ttft <= tier.max_ttft_s
        return ttft_ok and self.error_rate <= tier.max_error_rate


def finite(doc: Any) -> Any:
    """``doc`` with NaN and infinities replaced by None, recursively."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: finite(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [finite(v) for v in doc]
    return doc


def session_weights(
    seed: int, concurrency: int, keys: Sequence[tuple[int, str]], resamples: int
) -> Any:
    """Poisson(1) bootstrap weights, one row per resample, one column per agent session.

    A session's weights depend only on (seed, concurrency, agent, session), so the same
    session of the same trial draws the same weights in every rung: every rung replays the
    same sessions (same seed and dataset), and a change's gain is resampled as a difference
    over the same sessions (paired; common random numbers). Poisson weights are the
    streaming form of drawing sessions with replacement (the Poisson bootstrap).
    """
    import numpy as np

    out = np.empty((resamples, len(keys)), dtype=np.int64)
    for j, (agent, session) in enumerate(keys):
        digest = hashlib.sha256(f"ladder:{seed}:{concurrency}:{agent}:{session}".encode()).digest()
        out[:, j] = np.random.default_rng(list(digest[:16])).poisson(1.0, size=resamples)
    return out


def bootstrap_trial(
    records: Sequence[RequestRecord],
    w0: int,
    w1: int,
    accelerators: int,
    resamples: int,
    *,
    seed: int,
    concurrency: int,
) -> tuple[list[float], list[float], int]:
    """Per resample: the nearest-rank p25 speed of the requests sent in the window and the
    tokens inside the window per second per accelerator (engine.metrics' rules), both
    under one draw of session weights (``session_weights``); the throughput is the drawn
    sessions' weighted mean times the trial's session count, as in a draw of k sessions."""
    import numpy as np

    sent = [r for r in records if w0 <= r.t_send_ns < w1]
    groups = group_by_session(records)
    keys = [(g[0].agent_id, g[0].session_id) for g in groups]
    index = {key: k for k, key in enumerate(keys)}
    scale = NS / (w1 - w0) / max(1, accelerators)
    totals = np.array(
        [sum(sum(attributed_tokens(r, w0, w1)) for r in g) * scale for g in groups], dtype=float
    )
    pairs = sorted(
        (s, index[(r.agent_id, r.session_id)]) for r in sent if (s := r.output_speed) is not None
    )
    k = len(groups)
    if k < 1 or resamples < 1 or not pairs:
        return [], [], k
    values = np.array([v for v, _ in pairs], dtype=float)
    group_of = np.array([g for _, g in pairs], dtype=np.int64)
    weights = session_weights(seed, concurrency, keys, resamples)
    speeds: list[float] = []
    thr: list[float] = []
    for b in range(resamples):
        w = weights[b]
        drawn = int(w.sum())
        reached = np.cumsum(w[group_of])
        total = int(reached[-1])
        if not drawn or not total:  # every session drew 0: no resample (p ≈ e^-k)
            speeds.append(math.nan)
            thr.append(math.nan)
            continue
        # rescaled to the trial's k sessions, as a draw of k with replacement would be
        thr.append(float(w @ totals) * k / drawn)
        rank = max(1, math.ceil(0.25 * total))
        speeds.append(float(values[int(np.searchsorted(reached, rank))]))
    return speeds, thr, k


def _server_figures(start: str | None, end: str | None) -> dict[str, Any]:
    if start is None or end is None:
        return {"scraped": False}
    delta = window_delta(parse_metrics(start), parse_metrics(end))
    spec = spec_figures(delta)
    return {
        "scraped": True,
        "spec_acceptance": None if spec is None else spec.get("acceptance_rate"),
        "mean_acceptance_length": None if spec is None else spec.get("mean_acceptance_length"),
        "prefix_cache_hit_rate": prefix_cache_hit_rate(delta),
    }


def server_figures_parsed(
    start: dict[str, float] | None, end: dict[str, float] | None
) -> dict[str, Any]:
    """``_server_figures`` from counters already parsed (the platform's stored scrapes)."""
    if not start or not end:
        return {"scraped": False}
    delta = window_delta(start, end)
    spec = spec_figures(delta)
    return {
        "scraped": True,
        "spec_acceptance": None if spec is None else spec.get("acceptance_rate"),
        "mean_acceptance_length": None if spec is None else spec.get("mean_acceptance_length"),
        "prefix_cache_hit_rate": prefix_cache_hit_rate(delta),
    }


def _load_dataset(spec: LadderSpec, ds: dict[str, Any], cache: dict[str, Any]) -> Any:
    key = orjson.dumps(ds, option=orjson.OPT_SORT_KEYS).decode()
    if key in cache:
        return cache[key]
    if "path" in ds:
        path = Path(ds["path"])
        path = path if path.is_absolute() else spec.base_dir / path
        try:
            trajectories = load_dataset(path).trajectories
        except FileNotFoundError:
            raise LadderError(f"dataset.path: not found: {ds['path']}") from None
        except DatasetError as exc:
            raise LadderError(f"dataset.path: {exc}") from None
    else:
        from runner.engine.datasets.corpus import build_corpus
        from runner.engine.datasets.synthetic import generate_dataset
        from runner.engine.tokens import TokenCounter

        gen = ds["generate"]
        counter = TokenCounter()
        corpus = build_corpus(counter, discover=False)
        trajectories = generate_dataset(
            seed=gen.get("seed", 1),
            trajectories=gen.get("trajectories", 200),
            corpus=corpus,
            counter=counter,
        ).trajectories
    kind = ds.get("output_kind")
    if kind:
        # a chat-like workload: every turn's text is of one kind
        trajectories = with_output_kind(trajectories, kind)
    cache[key] = trajectories
    return trajectories


def measure_rung(
    spec: LadderSpec,
    plan: RungPlan,
    out_dir: Path,
    datasets: dict[str, Any],
    *,
    log: Callable[[str], None] = lambda _: None,
) -> list[TrialMeasure]:
    """Run the rung's trials (fixed concurrencies or a capped search) and reduce each to its
    point, server figures and bootstrap replicates; raw records are not kept."""
    cfg = plan.config
    rung_dir = out_dir / "rungs" / plan.digest[:16]
    rung_dir.mkdir(parents=True, exist_ok=True)
    if cfg.profile_doc is not None:
        profile_path = rung_dir / "profile.yaml"
        profile_path.write_text(yaml.safe_dump(cfg.profile_doc, sort_keys=False))
        profile = profile_from_dict(cfg.profile_doc)
        target = Target(sim_profile=str(profile_path), seed=spec.seed)
        model = spec.model or profile.served_model_names[0]
        accelerators = spec.accelerators or profile.accelerators_used
    else:
        target = Target.parse(cfg.target, api_key=spec.api_key, seed=spec.seed)
        model = spec.model or ""
        accelerators = spec.accelerators or 1
    trajectories = _load_dataset(spec, cfg.dataset, datasets)
    tp = spec.trials
    base = TrialConfig(
        concurrency=1,
        warmup_s=tp.warmup_s,
        duration_s=tp.duration_s,
        accelerators=accelerators,
        min_requests=tp.min_requests,
        replay=ReplayConfig(
            model=model, seed=spec.seed, ramp_s=tp.ramp_s, prime_cache=target.simulated
        ),
        bootstrap_resamples=0,
    )
    scrapes: dict[tuple[int, str], str | None] = {}
    threads: list[threading.Thread] = []
    out: list[TrialMeasure] = []

    def scrape(index: int, mark: str, transport: Any) -> None:
        text = getattr(transport, "metrics_text", None)
        if callable(text):  # the simulator: its counters in /metrics format, no I/O
            scrapes[(index, mark)] = text()
            return
        if target.base_url is None:
            return

        def fetch() -> None:
            try:
                scrapes[(index, mark)] = scrape_metrics(target.base_url or "", api_key=spec.api_key)
            except Exception:  # an endpoint without /metrics: no server figures
                scrapes[(index, mark)] = None

        th = threading.Thread(target=fetch, daemon=True)
        th.start()
        threads.append(th)

    def reduce(index: int, result: Any) -> None:
        for th in threads:
            th.join(timeout=30)
        s = result.summary
        speeds, thr, k = bootstrap_trial(
            result.records,
            s.window_start_ns,
            s.window_end_ns,
            accelerators,
            spec.resamples,
            seed=spec.seed,
            concurrency=result.concurrency,
        )
        text = scrapes.get((index, "start")), scrapes.get((index, "end"))
        server = _server_figures(*text) if all(isinstance(x, str) for x in text) else {}
        m = TrialMeasure(
            index=index,
            concurrency=result.concurrency,
            p25_speed=s.p25_output_speed,
            throughput=s.throughput_per_accelerator,
            error_rate=s.error_rate,
            ttft_s={kk: (None if math.isinf(v) else v) for kk, v in s.ttft_s.items()},
            requests=s.requests,
            sessions=k,
            verdicts={name: v.passed for name, v in result.verdicts.items()},
            server=server or {"scraped": False},
            speed_reps=speeds,
            throughput_reps=thr,
        )
        out.append(m)
        log(
            f"  N={m.concurrency}: p25 {m.p25_speed:.1f} tok/s, "
            f"{m.throughput:,.0f} tok/s per accelerator"
        )

    if tp.search_cap is None:

        async def main(transport: Any, clock: Any) -> None:
            for index, n in enumerate(tp.concurrencies):
                config = config_for_trial(base, n, index)

                def marks(mark: str, t_ns: int, i: int = index) -> None:
                    scrape(i, mark, transport)

                result = await run_trial(
                    transport, clock, trajectories, config, spec.tiers, on_window=marks
                )
                reduce(index, result)
                if tp.stop_below is not None and result.summary.p25_output_speed < tp.stop_below:
                    break

        run_on_target(target, main)
    else:
        counter = iter(range(10**9))

        def on_result(result: Any) -> None:
            reduce(next(counter), result)

        search_job(
            target=target,
            trajectories=trajectories,
            tiers=spec.tiers,
            base=base,
            cap=tp.search_cap,
            max_trials=tp.search_max_trials,
            on_trial_result=on_result,
            on_window=lambda i, mark, t, transport: scrape(i, mark, transport),
        )
    (rung_dir / "rung.json").write_bytes(
        orjson.dumps(
            {"digest": plan.digest, "name": plan.name, "trials": [m.to_json() for m in out]},
            option=orjson.OPT_SERIALIZE_NUMPY,
        )
    )
    return out


def load_measured(out_dir: Path, digest: str) -> list[TrialMeasure] | None:
    """A rung measured earlier under the same digest (same config, same conditions)."""
    path = out_dir / "rungs" / digest[:16] / "rung.json"
    if not path.is_file():
        return None
    try:
        doc = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError:
        return None
    if doc.get("digest") != digest:
        return None
    return [TrialMeasure.from_dict(t) for t in doc["trials"]]


# ---------------------------------------------------------------------------- attribution


def tier_for_speed(tiers: Sequence[Tier], speed: float) -> Tier | None:
    """The tier a speed falls in: the fastest tier whose speed is at most ``speed`` (the
    slowest tier below every tier's speed); its TTFT and error limits bound the frontier."""
    if not tiers:
        return None
    below = [t for t in tiers if t.min_p25_output_speed <= speed]
    if below:
        return max(below, key=lambda t: t.min_p25_output_speed)
    return min(tiers, key=lambda t: t.min_p25_output_speed)


def value_at_speed(
    points: Sequence[tuple[float, float]], speed: float
) -> tuple[float | None, bool]:
    """(throughput per accelerator at ``speed`` on the points' Pareto frontier, floor):
    linear between neighbours inside the frontier (``runner.engine.frontier``, as compare);
    slower than every frontier point: the slowest point's throughput, floor True; faster
    than every point: None."""
    pts = [Point(0, s, t) for s, t in points]
    frontier = pareto_frontier(pts)
    if not frontier:
        return None, False
    if speed < frontier[0].speed:
        return frontier[0].throughput, True
    return throughput_at_speed(pts, speed), False


def _interval(values: Sequence[float], confidence: float) -> tuple[float, float] | None:
    vals = sorted(v for v in values if v is not None and math.isfinite(v))
    # resamples where a trial drew no session, or the speed left a frontier's range, carry
    # no value; with fewer than half valued there is no interval
    if len(vals) < max(2, 0.5 * len(values)):
        return None
    alpha = (1 - confidence) / 2
    low = vals[max(0, math.ceil(alpha * len(vals)) - 1)]
    high = vals[min(len(vals) - 1, math.ceil((1 - alpha) * len(vals)) - 1)]
    return low, high


def _est(
    estimate: float | None, reps: Sequence[float], confidence: float
) -> dict[str, float | None]:
    iv = _interval(reps, confidence) if estimate is not None else None
    return {
        "estimate": estimate,
        "low": None if iv is None else iv[0],
        "high": None if iv is None else iv[1],
    }


@dataclass(slots=True)
class RungCurve:
    """A rung's value at each speed and per bootstrap resample."""

    at: dict[float, tuple[float | None, bool]]
    reps: dict[float, list[float]]
    single: float | None
    single_reps: list[float]


def rung_curve(
    trials: Sequence[TrialMeasure], spec: LadderSpec, speeds: Sequence[float]
) -> RungCurve:
    n_reps = min((len(t.speed_reps) for t in trials), default=0)
    at: dict[float, tuple[float | None, bool]] = {}
    reps: dict[float, list[float]] = {}
    for s in speeds:
        tier = tier_for_speed(spec.tiers, s)
        ok = [t for t in trials if t.feasible(tier)]
        at[s] = value_at_speed([(t.p25_speed, t.throughput) for t in ok], s)
        reps[s] = []
        for b in range(n_reps):
            v, _ = value_at_speed([(t.speed_reps[b], t.throughput_reps[b]) for t in ok], s)
            reps[s].append(math.nan if v is None else v)
    ones = [t for t in trials if t.concurrency == 1]
    single = ones[0].p25_speed if ones else None
    single_reps = list(ones[0].speed_reps) if ones else []
    return RungCurve(at, reps, single, single_reps)


def _diff(a: Sequence[float], b: Sequence[float]) -> list[float]:
    return [x - y for x, y in zip(a, b, strict=False)]


def _max_agents(trials: Sequence[TrialMeasure], tiers: Sequence[Tier]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ordered = sorted(trials, key=lambda t: t.concurrency)
    for tier in tiers:
        passed = [t.concurrency for t in ordered if t.verdicts.get(tier.name)]
        failed = [t.concurrency for t in ordered if not t.verdicts.get(tier.name)]
        best = max(passed, default=0)
        above = [n for n in failed if n > best]
        out[tier.name] = {
            "max_agents": best,
            "lowest_fail": min(above) if above else None,
        }
    return out


def _server_summary(trials: Sequence[TrialMeasure]) -> dict[str, Any]:
    """Speculative acceptance and prefix-cache hit rate from the server's counters, per
    trial and over the rung (requests-weighted mean of the trials that report them)."""
    per = [
        {
            "concurrency": t.concurrency,
            "spec_acceptance": t.server.get("spec_acceptance"),
            "prefix_cache_hit_rate": t.server.get("prefix_cache_hit_rate"),
        }
        for t in trials
    ]

    def mean(key: str) -> float | None:
        rows: list[tuple[float, int]] = [
            (float(v), t.requests) for t in trials if (v := t.server.get(key)) is not None
        ]
        weight = sum(w for _, w in rows)
        return sum(v * w for v, w in rows) / weight if weight else None

    return {
        "spec_acceptance": mean("spec_acceptance"),
        "prefix_cache_hit_rate": mean("prefix_cache_hit_rate"),
        "scraped": any(t.server.get("scraped") for t in trials),
        "per_trial": per,
    }


def attribute(
    spec: LadderSpec,
    plans: Sequence[RungPlan],
    measured: dict[str, list[TrialMeasure]],
    order: str,
    *,
    reused: dict[str, bool] | None = None,
) -> dict[str, Any]:
    """One order's rungs with their values and each change's gain and share per speed."""
    speeds = [s for s, _ in spec.evaluated_speeds()]
    curves = [rung_curve(measured[p.digest], spec, speeds) for p in plans]
    conf = spec.confidence
    rungs: list[dict[str, Any]] = []
    if order == "leave_one_out":
        top_curve = curves[1]
    else:
        top_curve = curves[-1]
    base_curve = curves[0]
    totals: dict[str, Any] = {}
    for s in speeds:
        a, b = top_curve.at[s][0], base_curve.at[s][0]
        est = None if a is None or b is None else a - b
        totals[f"{s:g}"] = _est(est, _diff(top_curve.reps[s], base_curve.reps[s]), conf)
    single_total = _est(
        None
        if top_curve.single is None or base_curve.single is None
        else top_curve.single - base_curve.single,
        _diff(top_curve.single_reps, base_curve.single_reps),
        conf,
    )
    for k, (plan, curve) in enumerate(zip(plans, curves, strict=True)):
        trials = measured[plan.digest]
        if order == "leave_one_out":
            ref = curves[1] if k >= 2 else None
            # the change's credit: all changes minus all but this one
            pair = (ref, curve) if ref is not None else None
        else:
            pair = (curve, curves[k - 1]) if k >= 1 else None
        at_speed: dict[str, Any] = {}
        for s in speeds:
            value, floor = curve.at[s]
            row: dict[str, Any] = {
                "throughput_per_accelerator": _est(value, curve.reps[s], conf),
                "floor": floor,
            }
            if pair is not None:
                hi, lo = pair
                va, vb = hi.at[s][0], lo.at[s][0]
                gain = None if va is None or vb is None else va - vb
                gain_reps = _diff(hi.reps[s], lo.reps[s])
                total_reps = _diff(top_curve.reps[s], base_curve.reps[s])
                total = totals[f"{s:g}"]["estimate"]
                share = None if gain is None or not total else gain / total
                share_reps = [
                    g / t if t else math.nan for g, t in zip(gain_reps, total_reps, strict=False)
                ]
                row["gain"] = _est(gain, gain_reps, conf)
                row["share"] = _est(share, share_reps, conf)
                g = row["gain"]
                row["within_noise"] = (
                    None if g["low"] is None else bool(g["low"] <= 0 <= (g["high"] or 0))
                )
            at_speed[f"{s:g}"] = row
        single: dict[str, Any] = _est(curve.single, curve.single_reps, conf)
        if pair is not None:
            hi, lo = pair
            gain = None if hi.single is None or lo.single is None else hi.single - lo.single
            single["gain"] = _est(gain, _diff(hi.single_reps, lo.single_reps), conf)
        rungs.append(
            {
                "index": k,
                "name": plan.name,
                "description": plan.description,
                "change": None if plan.change is None else spec.steps[plan.change].name,
                "applied": [spec.steps[i].name for i in plan.applied],
                "digest": plan.digest,
                "reused": bool((reused or {}).get(plan.digest)),
                "target": plan.config.target,
                "dataset": plan.config.dataset,
                "single_agent_speed": single,
                "max_agents": _max_agents(trials, spec.tiers),
                "server_metrics": _server_summary(trials),
                "speeds": at_speed,
                "trials": [
                    {
                        "concurrency": t.concurrency,
                        "p25_output_speed": t.p25_speed,
                        "throughput_per_accelerator": t.throughput,
                        "ttft_s": t.ttft_s,
                        "error_rate": t.error_rate,
                        "requests": t.requests,
                        "sessions": t.sessions,
                        "verdicts": t.verdicts,
                    }
                    for t in sorted(trials, key=lambda t: t.concurrency)
                ],
            }
        )
    out: dict[str, Any] = {
        "order": order,
        "rungs": rungs,
        "total_gain": totals,
        "single_agent_total_gain": single_total,
    }
    if order == "leave_one_out":
        interaction: dict[str, float | None] = {}
        for s in speeds:
            total = totals[f"{s:g}"]["estimate"]
            credits = [r["speeds"][f"{s:g}"].get("gain", {}).get("estimate") for r in rungs[2:]]
            if total is None or any(c is None for c in credits):
                interaction[f"{s:g}"] = None
            else:
                interaction[f"{s:g}"] = total - sum(c for c in credits if c is not None)
        out["interaction"] = interaction
    return out


def independent_pairs(spec: LadderSpec) -> list[dict[str, Any]]:
    """For each pair of changes, the profile paths both touch (none: independent)."""
    out = []
    for i, a in enumerate(spec.steps):
        for j in range(i + 1, len(spec.steps)):
            b = spec.steps[j]
            common = overlapping(a.patch or {}, b.patch or {})
            if a.dataset and b.dataset:
                common.append("dataset")
            if common:
                out.append({"changes": [a.name, b.name], "paths": common})
    return out


# ---------------------------------------------------------------------------- running


def ladder_document(
    spec: LadderSpec,
    plans: dict[str, list[RungPlan]],
    measured: dict[str, list[TrialMeasure]],
    *,
    reused: dict[str, bool],
    simulated: bool,
) -> dict[str, Any]:
    """ladder.json: every order's attribution (the first order's rungs at the top level)."""
    orders_doc = {o: attribute(spec, plans[o], measured, o, reused=reused) for o in plans}
    primary = orders_doc[next(iter(plans))]
    doc: dict[str, Any] = {
        "kind": "agentperf-ladder",
        "version": 1,
        "name": spec.name,
        "description": spec.description,
        "simulated": simulated,
        "order": next(iter(plans)),
        "order_note": ORDER_NOTE,
        "speeds": [{"speed": s, "why": why} for s, why in spec.evaluated_speeds()],
        "tier_set": spec.tier_set,
        "tiers": [t.to_dict() for t in spec.tiers],
        "conditions": {
            "seed": spec.seed,
            "dataset": spec.dataset,
            "trials": spec.trials.to_dict(),
            "bootstrap": {
                "resamples": spec.resamples,
                "confidence": spec.confidence,
                "by": "agent session",
            },
        },
        "changes": [
            {
                "name": c.name,
                "description": c.description,
                "patch": c.patch,
                "target": c.target,
                "dataset": c.dataset,
            }
            for c in spec.steps
        ],
        "overlapping_changes": independent_pairs(spec),
        "rungs": primary["rungs"],
        "total_gain": primary["total_gain"],
        "single_agent_total_gain": primary["single_agent_total_gain"],
        "orders": orders_doc,
    }
    out: dict[str, Any] = finite(doc)
    return out


def run_ladder(
    spec: LadderSpec,
    out_dir: str | os.PathLike[str],
    *,
    orders: Sequence[str] | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Measure every rung of every order (a digest measured once, here or in an earlier run
    into the same DIR, is reused) and write DIR/ladder.json and DIR/ladder.html."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chosen = list(orders or spec.orders)
    plans = {order: plan_rungs(spec, order) for order in chosen}
    measured: dict[str, list[TrialMeasure]] = {}
    reused: dict[str, bool] = {}
    datasets: dict[str, Any] = {}
    for order in chosen:
        for plan in plans[order]:
            if plan.digest in measured:
                reused[plan.digest] = True
                continue
            prior = load_measured(out, plan.digest)
            if prior is not None:
                log(f"rung {plan.name!r} ({order}): reused {plan.digest[:12]}")
                measured[plan.digest], reused[plan.digest] = prior, True
                continue
            log(f"rung {plan.name!r} ({order}): measuring {plan.digest[:12]}")
            measured[plan.digest] = measure_rung(spec, plan, out, datasets, log=log)
    simulated = all(p.config.profile_doc is not None for ps in plans.values() for p in ps)
    doc = ladder_document(spec, plans, measured, reused=reused, simulated=simulated)
    (out / "ladder.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    (out / "ladder.html").write_text(ladder_html(doc))
    return doc
