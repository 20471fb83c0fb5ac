"""A ladder's spec (docs/engine.md "ladder"): what the engine runs, built from the ladder file
(its document, ``agentperf.ladder.document.LadderFile``, checked there with every error
naming its field; the tiers and ``band: open`` resolved here). The command is ``python -m agentperf.engine ladder --steps LADDER.yaml
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
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson
import yaml
from pydantic import ValidationError

from agentperf.catalog_data import CatalogError, load_catalog
from agentperf.engine.trial import Tier, parse_tiers
from agentperf.fielderrors import NON_FIELD, validation_fields
from agentperf.ladder.document import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    BandSamples,
    LadderFile,
    Step,
    Trials,
)
from agentperf.simulator.profile import ProfileError


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


def parse_ladder(doc: Any, *, base_dir: Path | str = ".") -> LadderSpec:
    """A ladder from its YAML document (agentperf.ladder.document.LadderFile); LadderError
    names every field at fault."""
    base = Path(base_dir)
    try:
        file = LadderFile.model_validate(doc)
    except ValidationError as exc:
        raise LadderError(_problems(exc)) from None
    tiers, tier_set = _tiers(file.tiers, base)
    bootstrap = file.bootstrap
    return LadderSpec(
        name=file.name,
        description=file.description,
        baseline_name=file.baseline.name,
        baseline_description=file.baseline.description,
        baseline_target=file.baseline.target,
        baseline_patch=file.baseline.patch,
        steps=[_change(step) for step in file.changes],
        dataset=file.dataset.as_written(),
        tiers=tiers,
        tier_set=tier_set,
        speeds=list(file.speeds),
        trials=_trial_plan(file.trials),
        seed=file.seed,
        orders=list(file.orders),
        resamples=bootstrap.resamples,
        confidence=float(bootstrap.confidence),
        model=file.model,
        accelerators=file.accelerators,
        base_dir=base,
        band=[] if file.band is None else _band(file.band, file.baseline.target),
    )


def _problems(exc: ValidationError) -> str:
    """The refusal in the engine's words: ``steps[1].patch: a JSON Merge Patch must be a
    mapping``, every field at fault (the field map of agentperf.fielderrors, its list
    indices in brackets)."""

    def location(loc: Sequence[Any], err: Any) -> list[Any]:
        out = list(loc)
        if out[:1] == ["band"] and out[1:2] in (["open"], ["samples"]):
            del out[1]  # the band's form, a discriminator's tag, is not part of the path
        return out

    problems = []
    for path, messages in validation_fields(exc, location=location).items():
        where = "ladder" if path == NON_FIELD else re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", path)
        for message in messages:
            if message.startswith("unknown key") and "." not in where:
                where = f"ladder.{where}"  # a key of the file itself
            problems.append(f"{where}: {message}")
    return "; ".join(problems)


def _change(step: Step) -> Change:
    dataset = None if step.dataset is None else step.dataset.as_written()
    return Change(step.name, step.description, step.patch, step.target, dataset)


def _tiers(value: str | list[Any] | dict[str, Any], base_dir: Path) -> tuple[list[Tier], str]:
    """The tiers and the name of where they came from: a catalog tier set's slug, a JSON file
    (relative to the ladder file) or the tiers inline."""
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


def _band(band: Literal["open"] | BandSamples, target: str) -> list[tuple[str, dict[str, Any]]]:
    """The band samples (docs/simulator.md "Bands"): ``band: open`` is the baseline profile's
    open parameters (each end of each range and each alternative), ``band: {samples: …}``
    the file's merge patches of the baseline profile."""
    if band != "open":
        return [(sample.name, sample.patch or {}) for sample in band.samples]
    from agentperf.simulator.bands import open_patches

    try:
        out = open_patches(target[4:])
    except (ProfileError, ValueError) as exc:
        raise LadderError(f"band: {exc}") from None
    if not out:
        raise LadderError(f"band: profile {target[4:]} declares no open parameters")
    return out


def _trial_plan(trials: Trials) -> TrialPlan:
    """The trial plan: fixed concurrencies (each once, ascending) or a capped search."""
    given = trials.model_dump(
        include={"warmup_s", "duration_s", "ramp_s", "min_requests", "stop_below"},
        exclude_unset=True,
    )
    if trials.concurrencies is not None:
        given["concurrencies"] = tuple(sorted(set(trials.concurrencies)))
    if trials.search is not None:
        given["search_cap"] = trials.search.cap
        given["search_max_trials"] = trials.search.max_trials
    return TrialPlan(**given)


def load_ladder(path: str | os.PathLike[str]) -> LadderSpec:
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise LadderError(f"ladder file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise LadderError(f"{path}: not valid YAML: {exc}") from None
    return parse_ladder(doc, base_dir=p.parent)
