"""Energy over a trial's window from accelerator samples (pure: samples in, a dict out).

Two methods, in order of preference (docs/verification.md "telemetry"):

1. **Energy counters** (NVML `nvmlDeviceGetTotalEnergyConsumption`, millijoules since the
   driver loaded): per accelerator, the counter's delta over the window. Readings bracket
   the window's edges and the counter is interpolated linearly between the two readings
   around each edge, so nothing between readings is lost however far apart they are; the
   part of the window before the first or after the last reading is uncovered, never
   extrapolated.
2. **Integrated sampled power** (`nvidia-smi power.draw`, `amd-smi` socket power, NVML
   power when the counter is unsupported or reset): the trapezoid rule over the samples,
   with coverage = the share of the window within one sampling interval of a sample.

Either way the figure is the sum over the accelerators *in use* (>= 1 GiB of memory used
during the window, the rule the accelerator check uses), and the dict says which and how
many; idle accelerators on the same host are left out and counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

IN_USE_MIB = 1024.0

METHOD_COUNTER = "energy counter delta over the window, per accelerator ({tool})"
METHOD_INTEGRATED = "integrated sampled power ({tool} power; no energy counter read)"
DENOMINATOR = (
    "accelerator board power of the {n} accelerators in use (>= 1 GiB memory used), not wall power"
)


@dataclass(slots=True)
class GpuSample:
    t_ns: int
    index: int
    name: str
    power_w: float | None
    utilization_pct: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None
    # Cumulative energy counter in millijoules (NVML); None where the tool has none.
    energy_mj: float | None = None
    uuid: str = ""


def power_coverage(
    stamps: list[int], start_ns: int, end_ns: int, interval_s: float
) -> tuple[float, float]:
    """(share of [start, end) within one sampling interval of a power sample, longest gap
    in seconds between samples or the window's edges)."""
    window = end_ns - start_ns
    if window <= 0 or not stamps:
        return 0.0, window / 1e9
    half = int(interval_s * 1e9)
    covered = 0
    reach = start_ns
    for t in sorted(stamps):
        lo, hi = max(reach, t - half, start_ns), min(end_ns, t + half)
        if hi > lo:
            covered += hi - lo
            reach = hi
    edges = [start_ns, *sorted(stamps), end_ns]
    gap = max(b - a for a, b in zip(edges, edges[1:], strict=False))
    return covered / window, gap / 1e9


def integrate_power(stamps: list[int], totals: list[float], start_ns: int, end_ns: int) -> float:
    """Energy in joules over [start, end) by the trapezoid rule, held flat at the edges."""
    if not stamps:
        return 0.0
    points = sorted(zip(stamps, totals, strict=False))
    energy = (points[0][0] - start_ns) / 1e9 * points[0][1]
    for (t0, p0), (t1, p1) in zip(points, points[1:], strict=False):
        energy += (t1 - t0) / 1e9 * (p0 + p1) / 2
    energy += (end_ns - points[-1][0]) / 1e9 * points[-1][1]
    return energy


def _interpolate(readings: list[tuple[int, float]], t: int) -> float:
    """The counter at t, linear between the readings around it (t within their span)."""
    for (t0, e0), (t1, e1) in zip(readings, readings[1:], strict=False):
        if t0 <= t <= t1:
            return e0 if t1 == t0 else e0 + (e1 - e0) * (t - t0) / (t1 - t0)
    return readings[-1][1] if t >= readings[-1][0] else readings[0][1]


def counter_delta(
    readings: Sequence[tuple[int, float]], start_ns: int, end_ns: int
) -> tuple[float, int, int] | None:
    """(joules, covered start, covered end) of one accelerator's counter over the window;
    None when fewer than two readings touch it or the counter went backwards (a driver
    reload resets it)."""
    ordered = sorted(readings)
    before = [r for r in ordered if r[0] <= start_ns][-1:]
    after = [r for r in ordered if r[0] >= end_ns][:1]
    span = before + [r for r in ordered if start_ns < r[0] < end_ns] + after
    if len(span) < 2 or any(b[1] < a[1] for a, b in zip(span, span[1:], strict=False)):
        return None
    lo, hi = max(start_ns, span[0][0]), min(end_ns, span[-1][0])
    if hi <= lo:
        return None
    return (_interpolate(span, hi) - _interpolate(span, lo)) / 1000.0, lo, hi


def in_use(samples: Sequence[GpuSample]) -> list[int]:
    """Indices of the accelerators in use: >= 1 GiB memory used in any sample; every
    accelerator listed when the tool reports no memory."""
    indices = sorted({s.index for s in samples})
    if all(s.memory_used_mib is None for s in samples):
        return indices
    return sorted({s.index for s in samples if (s.memory_used_mib or 0) >= IN_USE_MIB})


def window_energy(
    samples: Sequence[GpuSample],
    start_ns: int,
    end_ns: int,
    *,
    interval_s: float,
    tool: str,
    denominator: str = DENOMINATOR,
) -> dict[str, Any]:
    """Measured power and energy over [start, end) of the accelerators in use."""
    window = end_ns - start_ns
    inside = [s for s in samples if start_ns <= s.t_ns < end_ns]
    used = in_use(inside or samples)
    on_host = len({s.index for s in samples})
    if window <= 0 or not used:
        return {"measured": False, "reason": "not measured: no accelerator in use in the window"}
    base: dict[str, Any] = {
        "measured": True,
        "tool": tool,
        "denominator": denominator.format(n=len(used)),
        "accelerators": len(used),
        "accelerators_on_host": on_host,
        "accelerators_used": [_identity(samples, i) for i in used],
    }
    utils = [s.utilization_pct for s in inside if s.index in used and s.utilization_pct is not None]
    base["utilization_pct"] = sum(utils) / len(utils) if utils else None
    integrated = _integrated(inside, used, start_ns, end_ns, interval_s)
    counted = _counted(samples, used, start_ns, end_ns)
    if counted is not None:
        per, lo, hi = counted
        power = sum(p["power_w"] for p in per)
        out = {
            **base,
            "method": METHOD_COUNTER.format(tool=tool),
            "power_w": power,
            "energy_j": sum(p["energy_j"] for p in per),
            "coverage": (hi - lo) / window,
            "max_gap_s": max(lo - start_ns, end_ns - hi) / 1e9,
            "samples": len({s.t_ns for s in samples if lo <= s.t_ns <= hi}),
            "per_accelerator": per,
        }
        if integrated is not None and integrated["power_w"] > 0:
            out["cross_check"] = {
                "integrated_power_w": integrated["power_w"],
                "difference_pct": 100.0 * (power - integrated["power_w"]) / integrated["power_w"],
            }
        return out
    if integrated is None:
        return {"measured": False, "reason": "not measured: no power sample in the window"}
    return {**base, "method": METHOD_INTEGRATED.format(tool=tool), **integrated}


def _identity(samples: Sequence[GpuSample], index: int) -> dict[str, Any]:
    s = next(s for s in samples if s.index == index)
    return {"index": index, "name": s.name, "uuid": s.uuid}


def _counted(
    samples: Sequence[GpuSample], used: list[int], start_ns: int, end_ns: int
) -> tuple[list[dict[str, Any]], int, int] | None:
    per: list[dict[str, Any]] = []
    los, his = [], []
    for index in used:
        readings = [
            (s.t_ns, s.energy_mj) for s in samples if s.index == index and s.energy_mj is not None
        ]
        delta = counter_delta(readings, start_ns, end_ns)
        if delta is None:
            return None  # one accelerator without a usable counter: integrate them all
        joules, lo, hi = delta
        los.append(lo)
        his.append(hi)
        per.append(
            {**_identity(samples, index), "energy_j": joules, "power_w": joules / ((hi - lo) / 1e9)}
        )
    return per, max(los), min(his)


def _integrated(
    inside: Sequence[GpuSample], used: list[int], start_ns: int, end_ns: int, interval_s: float
) -> dict[str, Any] | None:
    stamps, totals = [], []
    for t in sorted({s.t_ns for s in inside}):
        row = [s.power_w for s in inside if s.t_ns == t and s.index in used]
        if len(row) == len(used) and all(p is not None for p in row):
            stamps.append(t)
            totals.append(sum(p for p in row if p is not None))
    if not totals:
        return None
    coverage, max_gap_s = power_coverage(stamps, start_ns, end_ns, interval_s)
    return {
        "power_w": sum(totals) / len(totals),
        "energy_j": integrate_power(stamps, totals, start_ns, end_ns),
        "coverage": coverage,
        "max_gap_s": max_gap_s,
        "samples": len(totals),
    }
