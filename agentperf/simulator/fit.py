"""``python -m agentperf.simulator calibrate --fit``: the free parameters a profile declares,
fitted to a points file by bounded least squares on log error (docs/simulator.md
"Calibration: the fit").

A profile's ``fit`` section names the points file, the trials that measure each point
(engine trials on virtual time, the same code as ``calibrate``) and the free parameters,
each with a start, bounds and a reason::

    fit:
      points: gb300-nvl72-dsv41-flash-28oct      # agentperf/simulator/points/<name>.yaml, or a path
      trials: {concurrency: [1, 2, 1024, …], warmup_s: 30, duration_s: 60, ramp_s: 15, seed: 0}
      max_evaluations: 40
      free:
        deployment.efficiency.iteration_overhead_us:
          {start: 2200, bounds: [1000, 4000], reason: "fixed step latency: the 1-agent point"}

The residual of point *i* is ``log(simulated_i ÷ published_i)``. The solver is a small
deterministic Levenberg–Marquardt on the parameters scaled to [0, 1] within their bounds
(each step projected back into the box; forward-difference Jacobian, step ``h`` of the
box), so a seed and a profile give the same fit on any machine: no random restarts, no
threads in the arithmetic (``--jobs`` only evaluates a Jacobian's columns side by side).

The record (``<profile>.fit.json`` next to the profile) keeps the fitted values, each
point's residual, each point's leave-one-point-out error and a 95 % interval per parameter
from the linearised covariance ``σ² (JᵀJ)⁻¹`` with ``σ² = Σ r² ÷ (m − n)``. The
leave-one-out error is the linearised one, ``r_i ÷ (1 − h_ii)`` with ``H = J (JᵀJ)⁻¹ Jᵀ``
(exact for a linear model; ``--loo refit`` refits without each point instead, n more fits).
A fit of as many free parameters as points, or more, is refused: it can match anything and
says nothing about prediction.
"""

from __future__ import annotations

import copy
import json
import math
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from agentperf.simulator.least_squares import (
    Solution,
    condition_number,
    covariance,
    loo_linearised,
    solve,
)
from agentperf.simulator.profile import profile_from_dict, repo_relative, resolve_profile_path
from agentperf.simulator.profile_types import Profile, ProfileError

if TYPE_CHECKING:
    from agentperf.engine.trajectory import Trajectory

POINTS_DIR = Path(__file__).resolve().parent / "points"
RECORD_SUFFIX = ".fit.json"
Z95 = 1.959964
# Residual of a point the trials cannot measure at all (fewer than two trials): e^3 ≈ 20×.
MISSING_RESIDUAL = 3.0


class FitError(ValueError):
    """A fit that cannot run; the message names the field to fix."""


@dataclass(slots=True, frozen=True)
class FreeParameter:
    path: str  # dotted, from the profile's root: deployment.… or catalog_overrides.…
    start: float
    low: float
    high: float
    reason: str
    integer: bool = False

    def value(self, u: float) -> float:
        x = self.low + (self.high - self.low) * min(1.0, max(0.0, u))
        return float(round(x)) if self.integer else x

    def scaled(self, x: float) -> float:
        return (x - self.low) / (self.high - self.low)


@dataclass(slots=True, frozen=True)
class FitSpec:
    points_path: Path
    concurrency: tuple[int, ...]
    warmup_s: float
    duration_s: float
    ramp_s: float
    seed: int
    max_evaluations: int
    step: float
    free: tuple[FreeParameter, ...]


@dataclass(slots=True, frozen=True)
class Target:
    """One published point: ``single_agent``/``two_agents`` (p25 tok/s at N = 1 / 2) or
    ``frontier@S`` (throughput per accelerator at p25 speed S)."""

    name: str
    published: float


def _num(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FitError(f"{where}: expected a number, got {value!r}")
    return float(value)


def points_file(ref: str) -> Path:
    p = Path(ref)
    if p.is_file():
        return p
    for c in (POINTS_DIR / f"{ref}.yaml", POINTS_DIR / ref):
        if c.is_file():
            return c
    raise FitError(f"fit.points: {ref!r} is neither a file nor a name in {POINTS_DIR}")


def parse_fit(doc: dict[str, Any]) -> FitSpec:
    """The ``fit`` section of a profile document, checked (FitError names the field)."""
    raw = doc.get("fit")
    if not isinstance(raw, dict):
        raise FitError("fit: the profile declares no fit section (free parameters, points)")
    allowed = {"points", "trials", "free", "max_evaluations", "step"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise FitError(f"fit: unknown field(s) {', '.join(unknown)}")
    if "points" not in raw:
        raise FitError("fit.points: required")
    trials = raw.get("trials") or {}
    if not isinstance(trials, dict):
        raise FitError("fit.trials: expected a mapping")
    conc = trials.get("concurrency")
    if not isinstance(conc, list) or not conc:
        raise FitError("fit.trials.concurrency: a list of agent counts")
    free_raw = raw.get("free")
    if not isinstance(free_raw, dict) or not free_raw:
        raise FitError("fit.free: a mapping of parameter path → {start, bounds, reason}")
    free = []
    for path, spec in free_raw.items():
        where = f"fit.free.{path}"
        if not isinstance(spec, dict):
            raise FitError(f"{where}: expected {{start, bounds, reason}}")
        bounds = spec.get("bounds")
        if not isinstance(bounds, list) or len(bounds) != 2:
            raise FitError(f"{where}.bounds: [low, high]")
        low, high = _num(bounds[0], f"{where}.bounds"), _num(bounds[1], f"{where}.bounds")
        if not low < high:
            raise FitError(f"{where}.bounds: low must be below high")
        start = _num(spec.get("start"), f"{where}.start")
        if not low <= start <= high:
            raise FitError(f"{where}.start: outside its bounds")
        reason = spec.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise FitError(f"{where}.reason: say what the parameter stands for")
        if not str(path).startswith(("deployment.", "catalog_overrides.")):
            raise FitError(f"{where}: a path under deployment. or catalog_overrides.")
        source = str((doc.get("sources") or {}).get(str(path), ""))
        if str(path).startswith("deployment.") and not source.startswith("fitted"):
            raise FitError(
                f"sources.{path}: a free parameter's source says it is fitted "
                f'("fitted by calibrate --fit …"), not {source[:40]!r}'
            )
        free.append(
            FreeParameter(str(path), start, low, high, reason, bool(spec.get("integer", False)))
        )
    return FitSpec(
        points_path=points_file(str(raw["points"])),
        concurrency=tuple(int(_num(n, "fit.trials.concurrency")) for n in conc),
        warmup_s=_num(trials.get("warmup_s", 60.0), "fit.trials.warmup_s"),
        duration_s=_num(trials.get("duration_s", 120.0), "fit.trials.duration_s"),
        ramp_s=_num(trials.get("ramp_s", 30.0), "fit.trials.ramp_s"),
        seed=int(_num(trials.get("seed", 0), "fit.trials.seed")),
        max_evaluations=int(_num(raw.get("max_evaluations", 40), "fit.max_evaluations")),
        step=_num(raw.get("step", 0.03), "fit.step"),
        free=tuple(free),
    )


def targets_of(points: dict[str, Any]) -> list[Target]:
    out = []
    for key in ("single_agent", "two_agents"):
        if points.get(key):
            out.append(Target(key, float(points[key])))
    for speed, value in sorted(points["frontier"].items(), reverse=True):
        out.append(Target(f"frontier@{speed:g}", float(value)))
    return out


def set_path(doc: dict[str, Any], path: str, value: float) -> None:
    """Set a dotted leaf of a profile document; a catalog override's figure gets its value."""
    parts = path.split(".")
    node = doc
    for part in parts[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    leaf = parts[-1]
    v: float | int = int(value) if float(value).is_integer() else value
    if isinstance(node.get(leaf), dict):  # a catalog figure {value, source}
        node[leaf] = {**node[leaf], "value": v}
    else:
        node[leaf] = v


def get_path(doc: dict[str, Any], path: str) -> float | None:
    node: Any = doc
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if isinstance(node, dict):
        node = node.get("value")
    return float(node) if isinstance(node, int | float) and not isinstance(node, bool) else None


def profile_with(doc: dict[str, Any], values: dict[str, float], path: Path | None) -> Profile:
    d = copy.deepcopy(doc)
    for k, v in values.items():
        set_path(d, k, v)
    return profile_from_dict(d, path=path)


def frontier_value(points: Sequence[Any], speed: float) -> float | None:
    """Throughput per accelerator at p25 ``speed``: between the trials that bracket it (as
    ``calibrate``), else extrapolated from the two trials nearest in speed (the fit needs a
    number for every parameter set it tries; the record says which points were bracketed)."""
    from agentperf.simulator.calibrate import frontier_at

    y = frontier_at(points, speed)
    if y is not None:
        return y
    pts = sorted(points, key=lambda p: abs(p.p25_speed - speed))[:2]
    if len(pts) < 2 or pts[0].p25_speed == pts[1].p25_speed:
        return None
    a, b = pts
    f = (speed - a.p25_speed) / (b.p25_speed - a.p25_speed)
    y = a.throughput_per_accelerator + f * (
        b.throughput_per_accelerator - a.throughput_per_accelerator
    )
    return y if y > 0 else None


def simulated_values(
    profile: Profile, trajectories: Sequence[Trajectory], spec: FitSpec, targets: list[Target]
) -> list[float | None]:
    """Each target as the engine measures it on ``profile`` (trials of the fit spec)."""
    from agentperf.simulator.calibrate import run_sweep

    pts = run_sweep(
        profile,
        trajectories,
        concurrencies=spec.concurrency,
        warmup_s=spec.warmup_s,
        duration_s=spec.duration_s,
        ramp_s=spec.ramp_s,
        seed=spec.seed,
    )
    by_n = {p.concurrency: p for p in pts}
    out: list[float | None] = []
    for t in targets:
        if t.name == "single_agent":
            out.append(by_n[1].p25_speed if 1 in by_n else None)
        elif t.name == "two_agents":
            out.append(by_n[2].p25_speed if 2 in by_n else None)
        else:
            out.append(frontier_value(pts, float(t.name.split("@", 1)[1])))
    return out


def _pct(log_err: float | None) -> float | None:
    return None if log_err is None else round(100.0 * (math.exp(log_err) - 1.0), 2)


# ----------------------------------------------------------------------------- the fit

_STATE: dict[str, Any] = {}


def _evaluate(u: tuple[float, ...]) -> list[float]:
    """Residuals at scaled parameters ``u`` (module level: a forked worker runs it)."""
    st = _STATE
    spec: FitSpec = st["spec"]
    values = {p.path: p.value(x) for p, x in zip(spec.free, u, strict=True)}
    prof = profile_with(st["doc"], values, st["path"])
    sims = simulated_values(prof, st["trajectories"], spec, st["targets"])
    return [
        MISSING_RESIDUAL if s is None or s <= 0 else math.log(s / t.published)
        for s, t in zip(sims, st["targets"], strict=True)
    ]


def record_path(profile_path: Path) -> Path:
    return profile_path.with_name(profile_path.stem + RECORD_SUFFIX)


def load_document(profile: str | Path) -> tuple[dict[str, Any], Path]:
    path = resolve_profile_path(profile)
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict):
        raise ProfileError(f"{path}: expected a mapping")
    return doc, path


@dataclass(slots=True)
class _Evaluator:
    """The fit's residuals at scaled parameters: one evaluation in process, or a batch side
    by side in forked workers (``pool``), each logged with its values and rms."""

    free: tuple[FreeParameter, ...]
    t0: float
    pool: ProcessPoolExecutor | None
    log: Callable[[str], None] | None

    def _note(self, u: np.ndarray, res: np.ndarray) -> None:
        if self.log:
            vals = ", ".join(f"{p.value(x):g}" for p, x in zip(self.free, u, strict=True))
            self.log(f"[{time.monotonic() - self.t0:6.0f} s] ({vals}) rms {_rms(res):.4f}")

    def one(self, u: np.ndarray) -> np.ndarray:
        res = np.asarray(_evaluate(tuple(float(x) for x in u)))
        self._note(u, res)
        return res

    def batch(self, us: list[np.ndarray]) -> list[np.ndarray]:
        if self.pool is None or len(us) < 2:
            return [self.one(u) for u in us]
        args = [tuple(float(x) for x in u) for u in us]
        out = [np.asarray(r) for r in self.pool.map(_evaluate, args)]
        for u, res in zip(us, out, strict=True):
            self._note(u, res)
        return out


def _loo_errors(
    ev: _Evaluator, sol: Solution, spec: FitSpec, points: int, loo: str
) -> list[float | None]:
    """Each point's leave-one-out log error: linearised, or (``refit``) the residual of a
    fit made without the point, started from the full fit."""
    if loo != "refit":
        return loo_linearised(sol.jacobian, sol.residuals)
    errors: list[float | None] = []
    for i in range(points):
        keep = np.array([j for j in range(points) if j != i])
        s_i = solve(
            ev.one,
            sol.u,
            max_evaluations=max(len(spec.free) + 2, spec.max_evaluations // 2),
            step=spec.step,
            batch=ev.batch,
            rows=keep,
        )
        full = np.asarray(_evaluate(tuple(float(x) for x in s_i.u)))
        errors.append(float(full[i]))
    return errors


def _free_entries(spec: FitSpec, sol: Solution, cov: np.ndarray | None) -> dict[str, Any]:
    """The record's ``free``: each parameter's declaration, fitted value and interval."""
    free_doc: dict[str, Any] = {}
    for j, p in enumerate(spec.free):
        x = p.value(float(sol.u[j]))
        entry: dict[str, Any] = {
            "start": p.start,
            "bounds": [p.low, p.high],
            "reason": p.reason,
            "fitted": _round(x),
            "at_bound": bool(sol.u[j] <= 1e-9 or sol.u[j] >= 1 - 1e-9),
        }
        if cov is not None and math.isfinite(float(cov[j, j])):
            sd = math.sqrt(max(0.0, float(cov[j, j]))) * (p.high - p.low)
            entry["sd"] = _round(sd)
            entry["interval95"] = [_round(x - Z95 * sd), _round(x + Z95 * sd)]
            entry["interval95_in_bounds"] = [
                _round(max(p.low, x - Z95 * sd)),
                _round(min(p.high, x + Z95 * sd)),
            ]
        free_doc[p.path] = entry
    return free_doc


def _point_rows(
    targets: Sequence[Target], sol: Solution, loo_errs: Sequence[float | None]
) -> list[dict[str, Any]]:
    """The record's ``points``: each published figure, the fit's value and its errors."""
    rows = []
    for i, t in enumerate(targets):
        rows.append(
            {
                "point": t.name,
                "published": t.published,
                "simulated": _round(t.published * math.exp(float(sol.residuals[i]))),
                "error_pct": _pct(float(sol.residuals[i])),
                "loo_error_pct": _pct(loo_errs[i]),
            }
        )
    return rows


def _covariance_matrix(spec: FitSpec, cov: np.ndarray | None) -> list[list[float]] | None:
    """The covariance in parameter units, rows and columns in the order of ``free`` (bands
    sample along it)."""
    if cov is None:
        return None
    return [
        [
            _round(float(cov[i, j]) * (a.high - a.low) * (b.high - b.low))
            for j, b in enumerate(spec.free)
        ]
        for i, a in enumerate(spec.free)
    ]


def run_fit(
    profile: str | Path,
    trajectories: Sequence[Trajectory],
    *,
    jobs: int = 1,
    loo: str = "linearised",
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Fit the profile's free parameters; returns the record (not written)."""
    from agentperf.simulator.calibrate import load_points

    doc, path = load_document(profile)
    spec = parse_fit(doc)
    points = load_points(spec.points_path)
    targets = targets_of(points)
    m, n = len(targets), len(spec.free)
    if n >= m:
        raise FitError(
            f"fit.free: {n} free parameters against {m} points; a fit needs fewer parameters "
            "than points (it could match anything and would say nothing about prediction)"
        )
    _STATE.update(doc=doc, path=path, spec=spec, targets=targets, trajectories=trajectories)
    t0 = time.monotonic()
    pool = (
        ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("fork")) if jobs > 1 else None
    )
    ev = _Evaluator(spec.free, t0, pool, log)
    try:
        u0 = np.array([p.scaled(p.start) for p in spec.free])
        sol = solve(
            ev.one, u0, max_evaluations=spec.max_evaluations, step=spec.step, batch=ev.batch
        )
        loo_errs = _loo_errors(ev, sol, spec, m, loo)
    finally:
        if pool is not None:
            pool.shutdown()
    cov = covariance(sol.jacobian, sol.residuals)
    free = _free_entries(spec, sol, cov)
    return {
        "profile": doc.get("name"),
        "points_file": repo_relative(spec.points_path),
        "points_source": points.get("source"),
        "method": (
            "bounded Levenberg-Marquardt on log(simulated / published), parameters scaled to "
            f"[0, 1] in their bounds, forward-difference step {spec.step:g} of the box"
        ),
        "trials": {
            "concurrency": list(spec.concurrency),
            "warmup_s": spec.warmup_s,
            "duration_s": spec.duration_s,
            "ramp_s": spec.ramp_s,
            "seed": spec.seed,
            "dataset": "synthetic, seed 1, 200 trajectories, stdlib text",
        },
        "free": free,
        "points": _point_rows(targets, sol, loo_errs),
        "conditioning": _conditioning(free, sol.jacobian),
        "rms_log_error": round(_rms(sol.residuals), 6),
        "loo_method": (
            "refit without the point"
            if loo == "refit"
            else "linearised: r_i / (1 - h_ii), H = J (J^T J)^-1 J^T"
        ),
        "covariance": "linearised: s^2 (J^T J)^-1, s^2 = sum r^2 / (points - free)",
        "covariance_matrix": _covariance_matrix(spec, cov),
        "evaluations": sol.evaluations,
        "iterations": sol.iterations,
        "converged": sol.converged,
        "runtime_s": round(time.monotonic() - t0, 1),
    }


def _conditioning(free: dict[str, Any], jacobian: np.ndarray) -> dict[str, Any]:
    """How well the points pin the parameters: the scaled Jacobian's condition number and
    whether every 95 % interval lies inside its bounds (None when there are none)."""
    cond = condition_number(jacobian)
    each = [_interval_inside(e) for e in free.values()]
    # None: no interval at all (no spare points, or nothing free)
    inside = None if not each or None in each else all(each)
    return {
        "jacobian_condition_number": None if cond is None else _round(cond),
        "intervals_inside_bounds": inside,
    }


def _interval_inside(entry: dict[str, Any]) -> bool | None:
    """Whether a free parameter's 95 % interval lies inside its bounds; None without one."""
    iv = entry.get("interval95")
    if not iv:
        return None
    return bool(entry["bounds"][0] <= iv[0] and iv[1] <= entry["bounds"][1])


def _rms(r: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.asarray(r) ** 2))) if len(r) else 0.0


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def fitted_values(record: dict[str, Any]) -> dict[str, float]:
    return {k: float(v["fitted"]) for k, v in record["free"].items()}


def write_record(profile_path: Path, record: dict[str, Any]) -> Path:
    out = record_path(profile_path)
    out.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return out


def profile_mismatches(doc: dict[str, Any], record: dict[str, Any]) -> list[str]:
    """Free parameters whose value in the profile is not the record's fitted value."""
    out = []
    for k, v in fitted_values(record).items():
        have = get_path(doc, k)
        if have is None or not math.isclose(have, v, rel_tol=1e-6, abs_tol=1e-12):
            out.append(f"{k}: profile {have}, fitted {v:g}")
    return out


def compare_records(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Differences in fitted values, residuals and LOO errors (runtime aside)."""
    out = []
    for k in sorted(set(a["free"]) | set(b["free"])):
        fa, fb = a["free"].get(k, {}).get("fitted"), b["free"].get(k, {}).get("fitted")
        if fa is None or fb is None or not math.isclose(fa, fb, rel_tol=1e-5):
            out.append(f"{k}: {fa} vs {fb}")
    for pa, pb in zip(a["points"], b["points"], strict=False):
        for key in ("error_pct", "loo_error_pct"):
            x, y = pa.get(key), pb.get(key)
            if (x is None) != (y is None) or (
                x is not None and y is not None and abs(x - y) > 0.05
            ):
                out.append(f"{pa['point']} {key}: {x} vs {y}")
    return out


def format_record(record: dict[str, Any]) -> str:
    """The record as the command prints it: parameters, then points."""
    lines = [f"fit of {record['profile']} to {record['points_file']}"]
    lines.append(f"{'parameter':<58} {'fitted':>10} {'95 % interval':>24}  bounds")
    for k, v in record["free"].items():
        iv = v.get("interval95")
        iv_text = f"{iv[0]:g} … {iv[1]:g}" if iv else "n/a"
        flag = " (at a bound)" if v.get("at_bound") else ""
        if _interval_inside(v) is False:
            flag += " (interval past a bound: not pinned)"
        lines.append(
            f"{k:<58} {v['fitted']:>10g} {iv_text:>24}  [{v['bounds'][0]:g}, {v['bounds'][1]:g}]"
            + flag
        )
    lines.append(
        f"{'point':<16} {'published':>11} {'simulated':>11} {'error':>9} {'LOO error':>10}"
    )
    for p in record["points"]:
        loo = p["loo_error_pct"]
        loo_text = "undetermined" if loo is None else f"{loo:+.1f} %"
        lines.append(
            f"{p['point']:<16} {p['published']:>11,.0f} {p['simulated']:>11,.0f} "
            f"{p['error_pct']:>+8.1f} % {loo_text:>10}"
        )
    lines.append(
        f"rms log error {record['rms_log_error']:.4f}; {record['evaluations']} evaluations, "
        f"{record['iterations']} iterations, converged: {record['converged']}; "
        f"{record['runtime_s']:.0f} s"
    )
    cond = record.get("conditioning")
    if cond:
        number = cond["jacobian_condition_number"]
        lines.append(
            "conditioning: Jacobian condition number "
            + ("infinite (a direction no point moves)" if number is None else f"{number:.3g}")
            + {
                True: "; every interval inside its bounds",
                False: "; an interval runs past its bounds",
                None: "; no intervals (no spare points)",
            }[cond["intervals_inside_bounds"]]
        )
    return "\n".join(lines)


_KEY_LINE = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z0-9_]+):(?P<rest>.*)$")


def _format_value(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.6g}"


def update_profile_text(text: str, values: dict[str, float]) -> str:
    """The profile's YAML with each free parameter's value replaced in place (comments and
    layout kept); block mappings and one-line flow mappings (``k: {a: 1, b: 2}``)."""
    lines = text.splitlines(keepends=True)
    for path, value in values.items():
        parts = path.split(".")
        stack: list[tuple[int, str]] = []
        done = False
        for i, line in enumerate(lines):
            m = _KEY_LINE.match(line.rstrip("\n"))
            if not m or line.lstrip().startswith("#"):
                continue
            indent = len(m["indent"])
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, m["key"]))
            keys = [k for _, k in stack]
            new = _format_value(value)
            if keys == parts:  # block leaf: `key: value  # comment`
                rest = m["rest"]
                vm = re.match(r"(\s*)([-+0-9.eE]+)(.*)$", rest)
                if vm:
                    lines[i] = f"{m['indent']}{m['key']}:{vm[1]}{new}{vm[3]}\n"
                    done = True
                    break
            n = len(keys)
            if keys == parts[:n] and n < len(parts) and "{" in m["rest"]:
                # flow mapping: walk the remaining keys inside the braces (one level deep)
                leaf = parts[-1]
                if n == len(parts) - 1:
                    pat = re.compile(rf"([{{,]\s*{re.escape(leaf)}:\s*)([-+0-9.eE]+)")
                    if pat.search(line):
                        lines[i] = pat.sub(lambda mm: str(mm[1]) + new, line, count=1)  # noqa: B023
                        done = True
                        break
        if not done:
            raise FitError(f"{path}: not found as a plain number in the profile; write it by hand")
    return "".join(lines)


def write_profile_values(profile_path: Path, record: dict[str, Any]) -> None:
    text = profile_path.read_text()
    new = update_profile_text(text, fitted_values(record))
    if yaml.safe_load(new) is None:
        raise FitError(f"{profile_path}: rewriting the fitted values broke the YAML")
    profile_path.write_text(new)
