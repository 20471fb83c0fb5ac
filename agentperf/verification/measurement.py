"""The checks of the measurement itself (docs/verification.md): trials repeated at one
concurrency agree, the accelerators and power were measured as claimed, the load generator
was healthy (every shard of a sharded trial, its clock known), and each trial's statistics
hold for the percentiles it reports."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from agentperf.verification import speculative
from agentperf.verification.checks import TrialData, result
from agentperf.verification.status import FAIL, PASS, WARN, worst_status

# repeatability
SPEED_TOLERANCE = 0.10
TTFT_TOLERANCE = 0.20
TTFT_TOLERANCE_ABS_S = 0.05
# telemetry (power)
POWER_MIN_COVERAGE = 0.95
POWER_MAX_GAP_S = 3.0


# ------------------------------------------------------------------------ repeatability


def _rel_spread(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return (max(values) - min(values)) / mean if mean > 0 else 0.0


def _intervals_overlap(trials: Sequence[TrialData], name: str) -> bool:
    """Whether the trials' 95% session-bootstrap intervals of `name` share a common point:
    then their disagreement is within sampling noise (few requests), not a changed system."""
    bounds = []
    for t in trials:
        stats = t.metrics.get("statistics") or {}
        interval = (stats.get("intervals") or {}).get(name) or {}
        low, high = interval.get("low"), interval.get("high")
        if low is None or high is None:
            return False
        bounds.append((float(low), float(high)))
    return max(lo for lo, _ in bounds) <= min(hi for _, hi in bounds)


def _spread_status(
    spread: float, tolerance: float, ts: Sequence[TrialData], interval: str
) -> tuple[str, bool]:
    """(status, whether the trials' intervals of ``interval`` overlap) of one spread: up
    to the tolerance passes, up to twice it warns, beyond fails unless it is sampling noise."""
    if spread > 2 * tolerance:
        noise = _intervals_overlap(ts, interval)
        return (WARN if noise else FAIL), noise
    return (WARN if spread > tolerance else PASS), False


def _repeat_group(
    n: int, ts: Sequence[TrialData], *, shared_host: bool
) -> tuple[dict[str, Any], str | None]:
    """One concurrency's repeated trials judged (docs/verification.md "repeatability"): the
    group's evidence, and a note for the summary when it did not pass."""
    speeds = [float(t.metrics.get("p25_output_speed") or 0.0) for t in ts]
    ttfts = [(t.metrics.get("ttft_s") or {}).get("p75") for t in ts]
    speed_spread = _rel_spread(speeds)
    finite = [float(x) for x in ttfts if x is not None and math.isfinite(float(x))]
    ttft_spread = _rel_spread(finite) if len(finite) == len(ttfts) else None
    ttft_abs = max(finite) - min(finite) if finite and len(finite) == len(ttfts) else None
    status, speed_noise = _spread_status(speed_spread, SPEED_TOLERANCE, ts, "p25_output_speed")
    noise = ["p25 speed"] if speed_noise else []
    if ttft_spread is not None and ttft_abs is not None and ttft_abs > TTFT_TOLERANCE_ABS_S:
        ttft_status, ttft_noise = _spread_status(ttft_spread, TTFT_TOLERANCE, ts, "ttft_p75")
        if ttft_noise:
            noise.append("TTFT p75")
        # the group is judged by the worse of its two spreads
        status = worst_status((status, ttft_status))
    downgraded = status == FAIL and shared_host
    if downgraded:
        status = WARN
    note = None
    if status != PASS:
        why = [f"{' and '.join(noise)} within sampling noise: intervals overlap"] if noise else []
        if downgraded:
            why.append("the host is shared with other work: reported, not failed")
        note = (
            f"N={n}: p25 speed spread {speed_spread:.1%}"
            + (f", TTFT p75 spread {ttft_spread:.1%}" if ttft_spread else "")
            + (f" ({'; '.join(why)})" if why else "")
        )
    group = {
        "concurrency": n,
        "trials": [t.index for t in ts],
        "phases": [t.phase for t in ts],
        "p25_output_speed": speeds,
        "ttft_p75_s": ttfts,
        "speed_spread": speed_spread,
        "ttft_spread": ttft_spread,
        "sampling_noise": noise,
        "shared_host_warning": downgraded,
        "status": status,
    }
    return group, note


def check_repeatability(
    trials: Sequence[TrialData], *, shared_host: bool = False
) -> dict[str, Any]:
    """``shared_host``: the pool's search options say its host also runs other work (the
    local CPU pool shares the web tier's host), so a spread beyond tolerance is reported as
    a warning, not a failure: it measures the host's other load as much as the system."""
    rule = (
        f"trials repeated at the same N (confirmations, marginal repeats) agree: p25 speed "
        f"spread <= {SPEED_TOLERANCE:.0%} of its mean, TTFT p75 spread <= "
        f"{TTFT_TOLERANCE:.0%} (or {TTFT_TOLERANCE_ABS_S * 1000:.0f} ms); up to twice that "
        "warns, beyond fails — unless the trials' 95% session-bootstrap intervals overlap, "
        "when the spread is sampling noise and only warns"
        + ("; on a pool whose host is shared with other work it only warns" if shared_host else "")
    )
    by_n: dict[int, list[TrialData]] = {}
    for t in trials:
        by_n.setdefault(t.concurrency, []).append(t)
    groups: list[dict[str, Any]] = []
    notes: list[str] = []
    for n, ts in sorted(by_n.items()):
        if len(ts) < 2:
            continue
        group, note = _repeat_group(n, ts, shared_host=shared_host)
        groups.append(group)
        if note:
            notes.append(note)
    worst = worst_status([PASS, *(g["status"] for g in groups)])
    if not groups:
        return result(
            "repeatability",
            WARN,
            "no trial was repeated: nothing confirms the results",
            rule,
            {"groups": []},
        )
    summary = (
        "; ".join(notes)
        if notes
        else (
            f"{len(groups)} repeated concurrencies agree (largest p25 speed spread "
            f"{max(g['speed_spread'] for g in groups):.1%})"
        )
    )
    return result("repeatability", worst, summary, rule, {"groups": groups})


# -------------------------------------------------------------------------- telemetry


def accelerators_seen(
    run_telemetry: dict[str, Any], trials: Sequence[TrialData]
) -> tuple[int | None, str]:
    """(accelerators the runner saw in use, where from); None when nothing was seen."""
    sim = [
        ((t.telemetry or {}).get("server_metrics") or {})
        .get("end", {})
        .get(speculative.SIM_ACCELERATORS)
        for t in trials
    ]
    sim_values = [int(v) for v in sim if v is not None]
    if sim_values:
        return max(sim_values), "simulator /metrics (sim:accelerators_used)"
    accels = (run_telemetry or {}).get("accelerators") or []
    if (run_telemetry or {}).get("measured") and accels:
        used = [a for a in accels if (a.get("memory_used_mib") or 0) >= 1024]
        if any("memory_used_mib" in a for a in accels):
            return len(used), f"{run_telemetry.get('tool')} (accelerators with >= 1 GiB in use)"
        return len(accels), f"{run_telemetry.get('tool')} (accelerators listed)"
    return None, (run_telemetry or {}).get("reason") or "not measured"


def check_accelerators(
    claimed: int | None, run_telemetry: dict[str, Any], trials: Sequence[TrialData]
) -> dict[str, Any]:
    rule = "the accelerators the runner sees in use equal the config's accelerators used"
    seen, source = accelerators_seen(run_telemetry, trials)
    evidence = {
        "claimed": claimed,
        "seen": seen,
        "source": source,
        "inventory": (run_telemetry or {}).get("accelerators") or [],
    }
    if seen is None or claimed is None:
        return result("accelerators", WARN, f"not measured: {source}", rule, evidence)
    if seen != claimed:
        return result(
            "accelerators",
            FAIL,
            f"the config claims {claimed} accelerators used; {source} shows {seen}",
            rule,
            evidence,
        )
    return result(
        "accelerators",
        PASS,
        f"{seen} accelerators seen, {claimed} claimed ({source})",
        rule,
        evidence,
    )


def check_power(trials: Sequence[TrialData]) -> dict[str, Any]:
    rule = (
        f"power covers >= {POWER_MIN_COVERAGE:.0%} of each window with no gap over "
        f"{POWER_MAX_GAP_S:g} s; energy-counter deltas are preferred to integrating sampled "
        "power; the denominator (accelerator board power or wall power) is stated; never "
        "estimated"
    )
    rows = []
    bad = []
    for t in trials:
        tel = t.telemetry or {}
        if not tel.get("measured"):
            continue
        row = {
            k: tel.get(k)
            for k in (
                "power_w",
                "energy_j",
                "coverage",
                "max_gap_s",
                "method",
                "denominator",
                "samples",
                "tool",
            )
        }
        row["trial"] = t.index
        rows.append(row)
        coverage, gap = tel.get("coverage"), tel.get("max_gap_s")
        if coverage is None or coverage < POWER_MIN_COVERAGE:
            bad.append(f"trial {t.index}: coverage {coverage}")
        if gap is None or gap > POWER_MAX_GAP_S:
            bad.append(f"trial {t.index}: gap {gap} s")
    if not rows:
        reasons = {str((t.telemetry or {}).get("reason") or "not measured") for t in trials}
        return result(
            "telemetry", WARN, "; ".join(sorted(reasons)) or "not measured", rule, {"trials": []}
        )
    methods = sorted({str(r.get("method")) for r in rows})
    denominators = sorted({str(r.get("denominator")) for r in rows})
    if bad:
        return result(
            "telemetry", FAIL, "power incomplete: " + "; ".join(bad[:4]), rule, {"trials": rows}
        )
    return result(
        "telemetry",
        PASS,
        f"power measured in {len(rows)} trials by {', '.join(methods)}; denominator: "
        f"{', '.join(denominators)}",
        rule,
        {"trials": rows},
    )


# ------------------------------------------------------------------------- load generator


def check_load_generator(trials: Sequence[TrialData]) -> dict[str, Any]:
    """Every trial's load generator was healthy; for sharded trials (docs/engine.md
    "Sharded trials") every shard was, its clock offset was known within 1 ms, and the
    shards ran all N agents."""
    from agentperf.engine.clocksync import MAX_UNCERTAINTY_NS

    rule = (
        "every shard of every trial healthy (CPU, event-loop lag, first-token stamping delay "
        f"under the trial's limits), clock offsets known within {MAX_UNCERTAINTY_NS / 1e6:g} ms, "
        "the shards' agents adding up to N; a one-process trial's client healthy"
    )
    rows: list[dict[str, Any]] = []
    bad: list[str] = []
    sharded = 0
    for t in trials:
        lg = t.metrics.get("load_generator") or {}
        client = t.metrics.get("client") or {}
        if lg:
            sharded += 1
            per = lg.get("per_shard") or []
            rows.append(
                {
                    "trial": t.index,
                    "concurrency": t.concurrency,
                    "shards": lg.get("shards"),
                    "agents": [p.get("agents") for p in per],
                    "hosts": sorted({str(p.get("host")) for p in per}),
                    "max_cpu_percent": max(
                        (p["health"].get("cpu_percent") or 0 for p in per), default=None
                    ),
                    "max_clock_uncertainty_ns": lg.get("max_clock_uncertainty_ns"),
                    "failed_attempts": len(lg.get("failed_attempts") or []),
                }
            )
            if sum(int(p.get("agents") or 0) for p in per) != t.concurrency:
                bad.append(
                    f"trial {t.index}: shards ran {sum(p.get('agents') or 0 for p in per)}"
                    f" of {t.concurrency} agents"
                )
            for reason in lg.get("reasons") or []:
                bad.append(f"trial {t.index}: {reason}")
            if int(lg.get("max_clock_uncertainty_ns") or 0) > MAX_UNCERTAINTY_NS:
                bad.append(f"trial {t.index}: clock offset uncertainty over 1 ms")
        elif client and client.get("healthy") is False:
            bad.append(f"trial {t.index}: client unhealthy: {client.get('reason')}")
    evidence = {"sharded_trials": sharded, "trials": rows}
    if bad:
        return result("load_generator", FAIL, "; ".join(bad[:4]), rule, evidence)
    if not sharded:
        return result(
            "load_generator",
            PASS,
            f"one load-generator process per trial; its client was healthy in all "
            f"{len(trials)} trials",
            rule,
            evidence,
        )
    shards = sorted({int(r["shards"] or 0) for r in rows})
    hosts = sorted({h for r in rows for h in r["hosts"]})
    return result(
        "load_generator",
        PASS,
        f"{sharded} trials sharded over {'/'.join(map(str, shards))} load-generator "
        f"processes on {len(hosts)} host(s), every shard healthy, clocks within 1 ms",
        rule,
        evidence,
    )


# ------------------------------------------------------------------------- statistics


def check_statistics(trials: Sequence[TrialData], result_ns: Iterable[int]) -> dict[str, Any]:
    rule = (
        "each trial carries bootstrap intervals (resampling agent sessions) for p25 speed and "
        "the TTFT percentiles; a trial reported as a result has at least the MLPerf-style "
        "minimum requests for its percentiles (the true quantile inside ±margin at 99%)"
    )
    ns = set(result_ns)
    rows = []
    short = []
    for t in trials:
        stats = (t.metrics or {}).get("statistics") or {}
        if not stats:
            continue
        minimum = {k: v.get("min_requests") for k, v in (stats.get("min_requests") or {}).items()}
        need = max((v for v in minimum.values() if v), default=0)
        requests = int(t.metrics.get("requests") or 0)
        intervals = stats.get("intervals") or {}
        rows.append(
            {
                "trial": t.index,
                "concurrency": t.concurrency,
                "requests": requests,
                "min_requests": minimum,
                "ci_width": {k: v.get("width") for k, v in intervals.items()},
                "marginal": stats.get("marginal") or [],
            }
        )
        if t.concurrency in ns and requests < need:
            short.append(f"N={t.concurrency} (trial {t.index}): {requests} < {need}")
    if not rows:
        return result(
            "statistics", WARN, "no intervals were computed for these trials", rule, {"trials": []}
        )
    if short:
        return result(
            "statistics",
            WARN,
            "too few requests for the percentiles to hold at 99%: " + "; ".join(short[:4]),
            rule,
            {"trials": rows},
        )
    return result(
        "statistics",
        PASS,
        f"intervals for {len(rows)} trials; every result trial has enough requests",
        rule,
        {"trials": rows},
    )
