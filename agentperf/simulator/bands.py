"""Bands, not single guesses (docs/simulator.md "Bands"): the frontier of a profile over
the parameters its deployment's description leaves open, and over the fit's uncertainty.

A profile's ``open`` section declares each open parameter with a plausible range (or named
alternatives, each a merge patch of the deployment) and a reason, and how the band is read:

- ``envelope``: the band holds the frontier of every sampled value (the figure depends on a
  number nobody published; the band is what it could be);
- ``vendor_optimal``: the line is the best frontier over the open parameter's samples at
  each speed (what a vendor tuning it would reach); the band is the fit's uncertainty
  around it.

Samples, few by design (each costs one sweep of engine trials on virtual time): the nominal
profile, each open parameter at each end of its range (or each alternative) with the others
nominal, and, where the profile has a fit record, the fitted parameters at ±1.96 σ along the
widest axis of their covariance (scaled to their boxes, clipped to the bounds): the
direction the points pin down least. A profile whose values are shares of another
profile's fitted values (``fit_from``) gets that fit's pair, each value moved by the ratio
its fitted parameter moved. ``python -m agentperf.simulator band --profile P
[--write]`` runs them and writes ``<profile>.band.json`` next to the profile.
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agentperf.mergepatch import merge_patch, patch_paths
from agentperf.simulator import fit
from agentperf.simulator.profile import profile_from_dict, resolve_profile_path
from agentperf.simulator.profile_types import FitFrom, Profile, ProfileError

if TYPE_CHECKING:
    from agentperf.engine.trajectory import Trajectory

BAND_SUFFIX = ".band.json"
SAMPLE_SOURCE = "open parameter sample (docs/simulator.md 'Bands')"
GRID_POINTS = 16


@dataclass(slots=True, frozen=True)
class Sample:
    name: str
    kind: str  # nominal | open | fit
    values: dict[str, float]
    patch: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "values": self.values, "patch": self.patch}


def band_path(profile_path: Path) -> Path:
    return profile_path.with_name(profile_path.stem + BAND_SUFFIX)


def stored_band(profile: str | Path) -> dict[str, Any] | None:
    """The committed band of a profile (``<profile>.band.json``), None when it has none."""
    try:
        path = band_path(resolve_profile_path(profile))
    except ValueError:
        return None
    if not path.is_file():
        return None
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def fit_record(profile_path: Path) -> dict[str, Any] | None:
    p = fit.record_path(profile_path)
    if not p.is_file():
        return None
    rec: dict[str, Any] = json.loads(p.read_text())
    return rec


def fit_samples(record: dict[str, Any], doc: dict[str, Any] | None = None) -> list[Sample]:
    """±1.96 σ along the widest axis of the fit's covariance (in units of each parameter's
    box), clipped to the bounds; none when the record has no covariance. The step is taken
    from the profile's own values (`doc`) where it has them, so the band stays centred on
    the frontier it is applied to even when the profile does not (yet) carry the record's
    fitted values."""
    cov = record.get("covariance_matrix")
    if not cov:
        return []
    names = list(record["free"])
    widths = np.array(
        [record["free"][k]["bounds"][1] - record["free"][k]["bounds"][0] for k in names]
    )
    scaled = np.asarray(cov, dtype=float) / np.outer(widths, widths)
    w, vecs = np.linalg.eigh(scaled)
    lam, v = float(w[-1]), vecs[:, -1]
    if not math.isfinite(lam) or lam <= 0:
        return []
    v = v if v[int(np.argmax(np.abs(v)))] > 0 else -v  # a fixed sign: deterministic
    step = fit.Z95 * math.sqrt(lam) * v * widths
    out = []
    for sign, label in ((1.0, "+"), (-1.0, "−")):
        values = {}
        for k, d in zip(names, step, strict=True):
            lo, hi = record["free"][k]["bounds"]
            here = fit.get_path(doc, k) if doc is not None else None
            centre = float(here) if here is not None else record["free"][k]["fitted"]
            values[k] = fit._round(min(hi, max(lo, centre + sign * d)))
        out.append(Sample(f"fit {label}1.96σ (widest axis)", "fit", values))
    return out


def borrowed_record(borrowed: FitFrom) -> tuple[Path, dict[str, Any]]:
    """The profile path and fit record a ``fit_from`` names; a ProfileError when it has
    none."""
    source = resolve_profile_path(borrowed.profile)
    record = fit_record(source)
    if record is None:
        raise ProfileError(
            f"fit_from.profile: {borrowed.profile} has no fit record "
            f"(python -m agentperf.simulator calibrate --fit --profile {borrowed.profile})"
        )
    return source, record


def borrowed_fit_samples(profile: Profile, doc: dict[str, Any]) -> list[Sample]:
    """A profile whose values are shares of another profile's fitted values (``fit_from``):
    that fit's ±1.96 σ pair (around its own fitted values), each value of this profile
    moved by the ratio its fitted parameter moved. None when the other fit's record has no
    covariance."""
    borrowed = profile.fit_from
    if borrowed is None:
        return []
    _, record = borrowed_record(borrowed)
    out = []
    for s in fit_samples(record):
        values = {}
        for own, fitted_path in borrowed.parameters:
            spec = record["free"].get(fitted_path)
            if spec is None:
                raise ProfileError(
                    f"fit_from.parameters.{own}: {fitted_path} is not a free parameter of "
                    f"{borrowed.profile}'s fit ({', '.join(record['free'])})"
                )
            here = fit.get_path(doc, own)
            assert here is not None  # checked when the profile was loaded
            values[own] = fit._round(here * s.values[fitted_path] / float(spec["fitted"]))
        name = s.name.replace("fit", f"fit of {borrowed.profile}", 1)
        out.append(Sample(name, "fit", values))
    return out


def fit_summary(
    profile: Profile, path: Path, record: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The band's ``fit``: the record whose ±1.96 σ pair is in it (the profile's own, or
    the one its ``fit_from`` borrows, with the paths it moves), None when neither."""
    borrowed: dict[str, Any] = {}
    if record is None and profile.fit_from is not None:
        path, record = borrowed_record(profile.fit_from)
        borrowed = {
            "borrowed": dict(profile.fit_from.parameters),
            "reason": profile.fit_from.reason,
        }
    if record is None:
        return None
    return {
        "record": fit.record_path(path).name,
        "free": {k: v["fitted"] for k, v in record["free"].items()},
        **borrowed,
    }


def samples_for(
    profile: Profile, doc: dict[str, Any], record: dict[str, Any] | None
) -> list[Sample]:
    out = [Sample("nominal", "nominal", {})]
    for op in profile.open_parameters:
        if op.choices:
            for name, patch in op.choices:
                if patch:  # an empty patch is the profile as it stands: the nominal sample
                    out.append(Sample(f"{op.path} = {name}", "open", {}, patch))
            continue
        nominal = fit.get_path(doc, op.path)
        for v in (op.low, op.high):
            if nominal is None or not math.isclose(v, nominal):
                out.append(Sample(f"{op.path} = {v:g}", "open", {op.path: v}))
    if record is not None:
        out.extend(fit_samples(record, doc))
    else:
        out.extend(borrowed_fit_samples(profile, doc))
    return out


def sample_profile(doc: dict[str, Any], path: Path | None, sample: Sample) -> Profile:
    d = copy.deepcopy(doc)
    if sample.patch:
        d["deployment"] = merge_patch(d.get("deployment"), sample.patch)
        sources = dict(d.get("sources") or {})
        for leaf in patch_paths(sample.patch):
            sources.setdefault(f"deployment.{leaf}", SAMPLE_SOURCE)
        d["sources"] = sources
    for k, v in sample.values.items():
        fit.set_path(d, k, v)
    return profile_from_dict(d, path=path)


_STATE: dict[str, Any] = {}


def _sweep(sample: Sample) -> tuple[list[Any], float]:
    """One sample's sweep and its CPU seconds (module level: a forked worker runs it)."""
    from agentperf.simulator.calibrate import run_sweep

    t = time.process_time()
    st = _STATE
    pts = run_sweep(
        sample_profile(st["doc"], st["path"], sample), st["trajectories"], **st["trial"]
    )
    return pts, time.process_time() - t


def _frontier(points: Sequence[Any], speed: float) -> float | None:
    from agentperf.simulator.calibrate import frontier_at

    return frontier_at(points, speed)


def band_at(
    values: dict[str, float | None], kinds: dict[str, str], treatment: str
) -> dict[str, Any]:
    """One speed's band from each sample's value (None: the sample never reached it)."""
    nominal = values.get("nominal")
    got = {k: v for k, v in values.items() if v is not None}
    if not got:
        return {"nominal": None, "line": None, "low": None, "high": None}
    if treatment == "vendor_optimal":
        tuned = [v for k, v in got.items() if kinds[k] in ("nominal", "open")]
        line = max(tuned) if tuned else None
        around = [v for k, v in got.items() if kinds[k] == "fit"]
        pool = [x for x in [line, *around] if x is not None]
    else:
        line = nominal
        pool = list(got.values())
    return {
        "nominal": nominal,
        "line": line,
        "low": min(pool) if pool else None,
        "high": max(pool) if pool else None,
    }


def _run_sweeps(
    samples: Sequence[Sample], jobs: int, log: Callable[[str], None] | None, t_wall: float
) -> tuple[dict[str, list[Any]], float]:
    """Each sample's sweep by name (``_STATE`` holds the trial), and the CPU seconds the
    sweeps took; with ``jobs`` > 1 side by side in forked workers (each is deterministic)."""
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("fork")) as pool:
            results = list(pool.map(_sweep, samples))
    else:
        results = [_sweep(s) for s in samples]
    sweeps: dict[str, list[Any]] = {}
    for s, (pts, _) in zip(samples, results, strict=True):
        sweeps[s.name] = pts
        if log:
            tail = ", ".join(f"{p.concurrency}: {p.p25_speed:.0f}" for p in pts)
            log(f"[{time.monotonic() - t_wall:6.0f} s] {s.name}: {tail}")
    return sweeps, sum(c for _, c in results)


def _speed_grid(nominal: Sequence[Any]) -> list[float]:
    """GRID_POINTS speeds, log-spaced over the nominal sweep's p25 speeds (the curve)."""
    speeds = [p.p25_speed for p in nominal if p.p25_speed > 0]
    if not speeds or max(speeds) <= min(speeds):
        return []
    return [float(x) for x in np.geomspace(min(speeds), max(speeds), GRID_POINTS)]


def _band_at_speed(
    sweeps: dict[str, list[Any]], kinds: dict[str, str], treatment: str, speed: float
) -> dict[str, Any]:
    """The band at one per-agent speed, with each sample's frontier value there."""
    vals = {name: _frontier(pts, speed) for name, pts in sweeps.items()}
    out = band_at(vals, kinds, treatment)
    out["speed"] = speed
    out["by_sample"] = {k: None if v is None else round(v, 1) for k, v in vals.items()}
    return out


def _single_agent_band(
    sweeps: dict[str, list[Any]], kinds: dict[str, str], treatment: str
) -> dict[str, Any]:
    """The band of the one-agent p25 speed, with each sample's."""
    single = {
        name: next((p.p25_speed for p in pts if p.concurrency == 1), None)
        for name, pts in sweeps.items()
    }
    out = band_at(single, kinds, treatment)
    out["by_sample"] = single
    return out


def _treatment_note(treatment: str) -> str:
    if treatment == "vendor_optimal":
        return (
            "line: the best frontier over the open parameters' samples at each speed (the "
            "vendor-optimal choice); band: the fit's uncertainty around it"
        )
    return (
        "band: the envelope of the frontier over every sample (open parameters "
        "and the fit's uncertainty); line: the profile as it stands"
    )


def _open_parameter_rows(prof: Profile, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The band's ``open_parameters``: each one's name, reason and range or choices."""
    return [
        {
            "name": op.path,
            "reason": op.reason,
            **(
                {"choices": [name for name, _ in op.choices]}
                if op.choices
                else {"range": [op.low, op.high], "nominal": fit.get_path(doc, op.path)}
            ),
        }
        for op in prof.open_parameters
    ]


def compute_band(
    profile: str | Path,
    trajectories: Sequence[Trajectory],
    *,
    concurrencies: Sequence[int],
    warmup_s: float,
    duration_s: float,
    ramp_s: float,
    seed: int = 0,
    speeds: Sequence[float] = (),
    jobs: int = 1,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run every sample's sweep and read the band at ``speeds`` and along a grid."""
    doc, path = fit.load_document(profile)
    prof = profile_from_dict(copy.deepcopy(doc), path=path)
    record = fit_record(path)
    samples = samples_for(prof, doc, record)
    t_cpu, t_wall = time.process_time(), time.monotonic()
    trial = {
        "concurrencies": concurrencies,
        "warmup_s": warmup_s,
        "duration_s": duration_s,
        "ramp_s": ramp_s,
        "seed": seed,
    }
    _STATE.update(doc=doc, path=path, trajectories=trajectories, trial=trial)
    sweeps, child_cpu = _run_sweeps(samples, jobs, log, t_wall)
    kinds = {s.name: s.kind for s in samples}
    treatment = prof.open_treatment
    return {
        "kind": "agentperf-band",
        "profile": prof.name,
        "treatment": treatment,
        "treatment_note": _treatment_note(treatment),
        "open_parameters": _open_parameter_rows(prof, doc),
        "fit": fit_summary(prof, path, record),
        "samples": [s.to_dict() for s in samples],
        "trials": {
            "concurrency": list(concurrencies),
            "warmup_s": warmup_s,
            "duration_s": duration_s,
            "ramp_s": ramp_s,
            "seed": seed,
        },
        "speeds": [_band_at_speed(sweeps, kinds, treatment, float(s)) for s in speeds],
        "curve": [
            _band_at_speed(sweeps, kinds, treatment, s) for s in _speed_grid(sweeps["nominal"])
        ],
        "single_agent": _single_agent_band(sweeps, kinds, treatment),
        "sweeps": {
            name: [
                [p.concurrency, round(p.p25_speed, 2), round(p.throughput_per_accelerator, 1)]
                for p in pts
            ]
            for name, pts in sweeps.items()
        },
        "cost": {
            "samples": len(samples),
            "trials": sum(len(p) for p in sweeps.values()),
            "cpu_s": round(child_cpu if jobs > 1 else time.process_time() - t_cpu, 1),
            "wall_s": round(time.monotonic() - t_wall, 1),
        },
    }


def chart_band(band: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the frontier chart draws: ``[[speed, low, high], …]`` along the grid, the
    treatment and the open parameters' names (plain data: it caches)."""
    if not band:
        return None
    curve = [
        [round(c["speed"], 2), round(c["low"], 1), round(c["high"], 1)]
        for c in band.get("curve") or []
        if c.get("low") is not None and c.get("high") is not None
    ]
    if len(curve) < 2:
        return None
    return {
        "curve": curve,
        "treatment": band.get("treatment", "envelope"),
        "open": [p["name"] for p in band.get("open_parameters") or []],
    }


def format_band(band: dict[str, Any]) -> str:
    lines = [f"band of {band['profile']} ({band['treatment']}): {band['treatment_note']}"]
    for p in band["open_parameters"]:
        what = p.get("range") or p.get("choices")
        lines.append(f"  open: {p['name']} {what} — {p['reason']}")
    s = band["single_agent"]
    if s.get("low") is not None:
        lines.append(f"single agent: {s['line']:.0f} tok/s, band {s['low']:.0f} … {s['high']:.0f}")
    for row in band["speeds"]:
        if row["low"] is None:
            lines.append(f"at {row['speed']:g} tok/s per agent: no sample reached it")
            continue
        line = "not reached" if row["line"] is None else f"{row['line']:,.0f}"
        lines.append(
            f"at {row['speed']:g} tok/s per agent: {line} tok/s per accelerator, "
            f"band {row['low']:,.0f} … {row['high']:,.0f}"
        )
    c = band["cost"]
    lines.append(f"cost: {c['samples']} samples, {c['trials']} trials, {c['cpu_s']:.0f} s CPU")
    return "\n".join(lines)


def result_band(profile: str | None, overrides: dict[str, Any] | None) -> dict[str, Any] | None:
    """What a simulated result stores (``Result.band``): the profile's committed band as
    ratios to its nominal frontier along the speed grid (the chart applies them to the
    result's own frontier, whose dataset and trials may differ from the band's sweep), the
    treatment and the open parameters. None without a committed band, and for a profile
    patched by overrides (its band was never computed)."""
    if not profile or overrides:
        return None
    band = stored_band(profile)
    if band is None:
        return None
    ratios = []
    for row in band.get("curve") or []:
        nom, lo, hi = row.get("nominal"), row.get("low"), row.get("high")
        if nom and lo is not None and hi is not None:
            line = row.get("line") or nom
            ratios.append(
                [
                    round(row["speed"], 2),
                    round(lo / nom, 4),
                    round(hi / nom, 4),
                    round(line / nom, 4),
                ]
            )
    return {
        "profile": band["profile"],
        "treatment": band["treatment"],
        "treatment_note": band["treatment_note"],
        "open_parameters": band["open_parameters"],
        "fit": band.get("fit"),
        "samples": [s["name"] for s in band.get("samples") or []],
        "trials": band.get("trials"),
        "cost": band.get("cost"),
        "ratios": ratios,
        "basis": (
            "the profile's committed band (agentperf/simulator/profiles/"
            f"{band['profile']}.band.json) as ratios to its nominal frontier, applied to "
            "this result's frontier"
        ),
    }


def open_patches(profile: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """The profile's band samples as (name, merge patch of the profile document): each end
    of each open range, each alternative and the fit's ±1.96 σ pair where the profile has a
    fit record (a ladder's ``band: open``)."""
    doc, path = fit.load_document(profile)
    prof = profile_from_dict(copy.deepcopy(doc), path=path)
    out: list[tuple[str, dict[str, Any]]] = []
    for s in samples_for(prof, doc, fit_record(path)):
        if s.kind == "nominal":
            continue
        patch: dict[str, Any] = {"deployment": copy.deepcopy(s.patch)} if s.patch else {}
        for k, v in s.values.items():
            fit.set_path(patch, k, v)
            if k.startswith("catalog_overrides."):  # a figure override keeps its source
                src = fit.get_path(doc, k)
                if src is not None:
                    node: Any = doc
                    for part in k.split("."):
                        node = node[part]
                    if isinstance(node, dict):
                        leaf = patch
                        for part in k.split(".")[:-1]:
                            leaf = leaf[part]
                        leaf[k.split(".")[-1]] = {**node, "value": v}
        out.append((s.name, patch))
    return out
