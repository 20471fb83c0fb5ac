"""Attribution (docs/engine.md "ladder"): which change bought the speed-up, from the
rungs' measured trials (``TrialMeasure``, here or from the platform's stored trials:
``ladders/services.py``), with bootstrap intervals by agent session, and the band a
ladder on the twin carries into each share (``carry_band``).

Attribution (``attribute``): on each rung's frontier (the Pareto frontier of its trials
that meet the TTFT and error limits of the tier the speed falls in), throughput per
accelerator at speed *s* is interpolated linearly between neighbours as the compare page
does (``agentperf.engine.frontier``); a speed slower than every frontier point reads the
slowest point's throughput, flagged ``floor`` (the rung never got that slow: saturated or
capped, so it serves *at least* that much there); a speed faster than every point has no
value. Each bootstrap resample draws every trial's agent sessions with replacement (each
rung's trials independently) and recomputes the same chain, so a change's gain and share
come with percentile intervals; a gain whose interval holds 0 is ``within_noise``.

Order matters: a change's gain is measured on top of the changes before it. ``reverse``
applies the changes last-first; ``leave_one_out`` credits each change with the full
ladder's value minus the full ladder without it (those credits need not add up: the
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentperf.engine.frontier import Point, pareto_frontier, throughput_at_speed
from agentperf.engine.metrics import NS, RequestRecord, attributed_tokens
from agentperf.engine.stats import group_by_session, one_blas_thread
from agentperf.engine.trial import Tier
from agentperf.ladder.plan import RungPlan
from agentperf.ladder.spec import LadderSpec
from agentperf.mergepatch import overlapping

ORDER_NOTE = (
    "Order matters: each change is credited with the difference between its rung and the "
    "rung before it, i.e. measured on top of every change listed above it. A change that "
    "removes a bottleneck can look small before another change exposes that bottleneck, and "
    "large after. Compare the reverse order and leave-one-out credits before reading a "
    "share as the change's own worth."
)


# ---------------------------------------------------------------------------- the trials


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
    with one_blas_thread():  # the value of w @ totals must not depend on the core count
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


AT_TRIAL = "at a measured trial"
BETWEEN_TRIALS = "read between measured trials"
FLOOR = "floor: the rung never got that slow"


def reading(trials: Sequence[dict[str, Any]], speed: float, floor: bool) -> str | None:
    """How a rung's figure at ``speed`` was got, from the rung's trials in the ladder
    document: FLOOR, AT_TRIAL when a trial ran at exactly that p25 speed, else
    BETWEEN_TRIALS; None without trials. The public API and the page label each figure with
    it (docs/ladders.md "Reading a ladder")."""
    if not trials:
        return None
    if floor:
        return FLOOR
    hit = any(
        math.isclose(float(t["p25_output_speed"]), speed, rel_tol=1e-9, abs_tol=1e-9)
        for t in trials
        if t.get("p25_output_speed") is not None
    )
    return AT_TRIAL if hit else BETWEEN_TRIALS


def with_readings(doc: dict[str, Any]) -> dict[str, Any]:
    """The ladder document with ``read`` beside every rung's figure at a speed, and every
    gain taken against a floor turned into a bound (``floors_as_bounds``): a copy. Applied
    on read, so a ladder stored before either rule reads by them."""
    out = copy.deepcopy(doc)
    for order in (out.get("orders") or {}).values():
        for rung in order.get("rungs") or []:
            for key, row in (rung.get("speeds") or {}).items():
                row["read"] = reading(rung.get("trials") or [], float(key), bool(row.get("floor")))
        floors_as_bounds(order)
    return out


AT_LEAST = "at_least"
AT_MOST = "at_most"
UNKNOWN = "unknown"


def _bound(hi: dict[str, Any], lo: dict[str, Any]) -> dict[str, Any] | None:
    """A difference ``hi − lo`` of two rung figures where one or both is a floor ("the rung
    serves at least this much there"): never a value. hi a floor: the difference is at
    least hi − lo; lo a floor: at most; both: unknown. None when neither is a floor."""
    hi_floor, lo_floor = bool(hi.get("floor")), bool(lo.get("floor"))
    if not (hi_floor or lo_floor):
        return None
    a = (hi.get("throughput_per_accelerator") or {}).get("estimate")
    b = (lo.get("throughput_per_accelerator") or {}).get("estimate")
    if hi_floor and lo_floor or a is None or b is None:
        return {"kind": UNKNOWN, "value": None}
    return {"kind": AT_LEAST if hi_floor else AT_MOST, "value": a - b}


def _unvalued(est: dict[str, Any] | None) -> dict[str, Any]:
    return {**(est or {}), "estimate": None, "low": None, "high": None}


def floors_as_bounds(order_doc: dict[str, Any]) -> dict[str, Any]:
    """Within one order of a ladder document (in place, idempotent): a gain, share or total
    whose rungs' figure at that speed is a floor on either side has no estimate and no
    interval; it carries ``bound`` (``at_least`` / ``at_most`` with the difference of the
    two figures, or ``unknown``) instead, so nothing subtracts a floor as though it were a
    value (docs/ladders.md "Reading a ladder")."""
    rungs = order_doc.get("rungs") or []
    if len(rungs) < 2:
        return order_doc
    loo = order_doc.get("order") == "leave_one_out"
    top, base = (rungs[1] if loo else rungs[-1]), rungs[0]
    for key, total in (order_doc.get("total_gain") or {}).items():
        bound = _bound(top["speeds"].get(key) or {}, base["speeds"].get(key) or {})
        if bound is not None:
            order_doc["total_gain"][key] = {**_unvalued(total), "bound": bound}
    for k, rung in enumerate(rungs):
        if loo:
            pair = (rungs[1], rung) if k >= 2 else None
        else:
            pair = (rung, rungs[k - 1]) if k >= 1 else None
        if pair is None:
            continue
        hi, lo = pair
        for key, row in (rung.get("speeds") or {}).items():
            bound = _bound(hi["speeds"].get(key) or {}, lo["speeds"].get(key) or {})
            if bound is None or "gain" not in row:
                continue
            row["gain"] = {**_unvalued(row["gain"]), "bound": bound}
            row["share"] = _unvalued(row.get("share"))
            row["within_noise"] = None
    for key, total in (order_doc.get("total_gain") or {}).items():
        if total.get("estimate") is None:  # no total to share: no share is a value
            for rung in rungs:
                row = (rung.get("speeds") or {}).get(key)
                if row is not None and "share" in row:
                    row["share"] = _unvalued(row["share"])
    if loo and "interaction" in order_doc:
        for key, total in (order_doc.get("total_gain") or {}).items():
            credits = [(r["speeds"].get(key) or {}).get("gain") or {} for r in rungs[2:]]
            if total.get("estimate") is None or any(c.get("estimate") is None for c in credits):
                order_doc["interaction"][key] = None
    return order_doc


def value_at_speed(
    points: Sequence[tuple[float, float]], speed: float
) -> tuple[float | None, bool]:
    """(throughput per accelerator at ``speed`` on the points' Pareto frontier, floor):
    linear between neighbours inside the frontier (``agentperf.engine.frontier``, as compare);
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


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _diff(a: Sequence[float], b: Sequence[float]) -> list[float]:
    return [x - y for x, y in zip(a, b, strict=False)]


def _passes(trial: TrialMeasure, tier: Tier) -> bool:
    """The trial's verdict on ``tier``; a trial judged by another tier set (a rung of
    another workload, e.g. decode-heavy with its own set: docs/ladders.md "Workloads") is
    judged on the ladder's tier from its measured p25 speed, TTFT percentile and errors."""
    if tier.name in trial.verdicts:
        return trial.verdicts[tier.name]
    ttft = trial.ttft_s.get(f"p{tier.ttft_percentile:g}")
    return (
        trial.p25_speed >= tier.min_p25_output_speed
        and ttft is not None
        and ttft <= tier.max_ttft_s
        and trial.error_rate <= tier.max_error_rate
    )


def _max_agents(trials: Sequence[TrialMeasure], tiers: Sequence[Tier]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ordered = sorted(trials, key=lambda t: t.concurrency)
    for tier in tiers:
        passed = [t.concurrency for t in ordered if _passes(t, tier)]
        failed = [t.concurrency for t in ordered if not _passes(t, tier)]
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


def _gain_row(
    pair: tuple[RungCurve, RungCurve], top: RungCurve, base: RungCurve, s: float, conf: float
) -> dict[str, Any]:
    """A change's gain at speed ``s`` (the higher rung of ``pair`` minus the lower), its
    share of the total gain (top minus base) and whether it sits within the noise."""
    hi, lo = pair
    gain = _difference(hi.at[s][0], lo.at[s][0])
    gain_reps = _diff(hi.reps[s], lo.reps[s])
    total_reps = _diff(top.reps[s], base.reps[s])
    total = _difference(top.at[s][0], base.at[s][0])
    share = None if gain is None or not total else gain / total
    share_reps = [g / t if t else math.nan for g, t in zip(gain_reps, total_reps, strict=False)]
    g = _est(gain, gain_reps, conf)
    return {
        "gain": g,
        "share": _est(share, share_reps, conf),
        "within_noise": None if g["low"] is None else bool(g["low"] <= 0 <= (g["high"] or 0)),
    }


def _single_gain(hi: RungCurve, lo: RungCurve, conf: float) -> dict[str, Any]:
    gain = _difference(hi.single, lo.single)
    return _est(gain, _diff(hi.single_reps, lo.single_reps), conf)


def _trial_rows(trials: Sequence[TrialMeasure]) -> list[dict[str, Any]]:
    """The rung's trials as ladder.json lists them, by concurrency."""
    return [
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
    ]


def _credited_pair(
    order: str, k: int, curves: Sequence[RungCurve]
) -> tuple[RungCurve, RungCurve] | None:
    """The two rungs whose difference is rung ``k``'s change's credit: the rung and the one
    before it; in leave-one-out, all changes and all but this one (rungs 2…)."""
    if order == "leave_one_out":
        return (curves[1], curves[k]) if k >= 2 else None
    return (curves[k], curves[k - 1]) if k >= 1 else None


def _interaction(
    speeds: Sequence[float], totals: dict[str, Any], rungs: list[dict[str, Any]]
) -> dict[str, float | None]:
    """Leave-one-out's remainder at each speed: the total gain less every change's credit."""
    interaction: dict[str, float | None] = {}
    for s in speeds:
        total = totals[f"{s:g}"]["estimate"]
        credits = [r["speeds"][f"{s:g}"].get("gain", {}).get("estimate") for r in rungs[2:]]
        if total is None or any(c is None for c in credits):
            interaction[f"{s:g}"] = None
        else:
            interaction[f"{s:g}"] = total - sum(c for c in credits if c is not None)
    return interaction


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
    top, base = (curves[1] if order == "leave_one_out" else curves[-1]), curves[0]
    totals = {
        f"{s:g}": _est(
            _difference(top.at[s][0], base.at[s][0]), _diff(top.reps[s], base.reps[s]), conf
        )
        for s in speeds
    }
    rungs: list[dict[str, Any]] = []
    for k, (plan, curve) in enumerate(zip(plans, curves, strict=True)):
        trials = measured[plan.digest]
        pair = _credited_pair(order, k, curves)
        at_speed: dict[str, Any] = {}
        for s in speeds:
            value, floor = curve.at[s]
            row = {"throughput_per_accelerator": _est(value, curve.reps[s], conf), "floor": floor}
            at_speed[f"{s:g}"] = (
                row if pair is None else {**row, **_gain_row(pair, top, base, s, conf)}
            )
        single: dict[str, Any] = _est(curve.single, curve.single_reps, conf)
        if pair is not None:
            single["gain"] = _single_gain(*pair, conf)
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
                "trials": _trial_rows(trials),
            }
        )
    out: dict[str, Any] = {
        "order": order,
        "rungs": rungs,
        "total_gain": totals,
        "single_agent_total_gain": _single_gain(top, base, conf),
    }
    if order == "leave_one_out":
        out["interaction"] = _interaction(speeds, totals, rungs)
    return floors_as_bounds(out)


def carry_band(doc: dict[str, Any], samples: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each change's gain and share get a band (docs/simulator.md "Bands"): the lowest and
    highest of the nominal ladder's bootstrap interval and every band sample's estimate
    (the same ladder, the baseline profile patched by the sample). A share whose band holds
    0 is ``not_distinguishable``: under some value of an open parameter, or within the
    noise, the change bought nothing (or cost)."""

    def carry(rungs: list[dict[str, Any]], order: str) -> None:
        for k, rung in enumerate(rungs):
            for s, row in rung["speeds"].items():
                if "share" not in row:
                    continue
                for key in ("gain", "share"):
                    est = row[key]
                    vals: list[float] = []
                    by_sample: dict[str, float | None] = {}
                    for name, sdoc in samples.items():
                        try:
                            other = sdoc["orders"][order]["rungs"][k]["speeds"][s][key]
                        except (KeyError, IndexError, TypeError):
                            other = {}
                        v = (other or {}).get("estimate")
                        by_sample[name] = v
                        if v is not None:
                            vals.append(v)
                    pool = vals + [
                        x
                        for x in (est.get("estimate"), est.get("low"), est.get("high"))
                        if x is not None
                    ]
                    row[f"{key}_band"] = {
                        "low": min(pool) if pool else None,
                        "high": max(pool) if pool else None,
                        "by_sample": by_sample,
                    }
                band = row["share_band"]
                row["not_distinguishable"] = (
                    None if band["low"] is None else bool(band["low"] <= 0 <= band["high"])
                )

    for order, od in doc["orders"].items():
        carry(od["rungs"], order)
    carry(doc["rungs"], doc["order"])
    doc["band"] = {
        "samples": list(samples),
        "note": (
            "every rung measured again with the baseline profile patched by each sample; a "
            "share's band spans its bootstrap interval and every sample's estimate; a band "
            "holding 0 is not distinguishable"
        ),
    }
    out: dict[str, Any] = finite(doc)
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


# ---------------------------------------------------------------------------- ladder.json


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
