"""Frontier math for comparisons: pure functions over a result's measured points.

A result is a set of trial points (concurrency N, p25 output speed per agent x, throughput
per accelerator y). Comparisons read both systems off at the same x (iso-speed), at the
same N (iso-concurrency) and at N = 1 (single-agent speed): docs/engine.md "Frontier and
comparisons".

Rules, chosen to never claim more than was measured:
- iso-speed reads the *Pareto frontier* (points no other point beats on both speed and
  throughput), sorted by speed, and interpolates linearly between neighbours. A speed
  outside the frontier's measured range has no value (None), never an extrapolation.
- iso-concurrency averages repeated trials at the same N (confirmation runs), then
  interpolates linearly in N inside the measured range; None outside.
- a ratio is a / b; None when either side is missing or b is not positive.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Point:
    concurrency: int
    speed: float  # p25 output speed per agent, tok/s
    throughput: float  # (input incl. cached + output) tok/s per accelerator


def _valid(points: Iterable[Point]) -> list[Point]:
    return [
        p
        for p in points
        if math.isfinite(p.speed)
        and math.isfinite(p.throughput)
        and p.speed > 0
        and p.throughput >= 0
    ]


def pareto_frontier(points: Iterable[Point]) -> list[Point]:
    """Points not dominated by another (faster and at least as much throughput, or vice
    versa), sorted by speed ascending; throughput is then strictly decreasing."""
    # Fastest first; keep a point only if it has more throughput than every faster one.
    ordered = sorted(_valid(points), key=lambda p: (-p.speed, -p.throughput))
    out: list[Point] = []
    best = -math.inf
    for p in ordered:
        if p.throughput > best:
            out.append(p)
            best = p.throughput
    out.reverse()
    return out


def _interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float | None:
    """Linear interpolation on sorted, distinct xs; None outside [xs[0], xs[-1]]."""
    if not xs or not math.isfinite(x) or x < xs[0] or x > xs[-1]:
        return None
    i = bisect.bisect_left(xs, x)
    if xs[i] == x:
        return ys[i]
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def throughput_at_speed(points: Iterable[Point], speed: float) -> float | None:
    """Throughput per accelerator the frontier reaches at `speed` tok/s per agent."""
    frontier = pareto_frontier(points)
    return _interpolate([p.speed for p in frontier], [p.throughput for p in frontier], speed)


AT_POINT = "at a measured point"
BETWEEN_POINTS = "read between measured points"


def read_at_speed(points: Iterable[Point], speed: float) -> str | None:
    """How `throughput_at_speed` gets its value: AT_POINT when a frontier point was measured
    at that speed, BETWEEN_POINTS when it is interpolated between two, None outside the
    measured range (no value). Pages and the API label every iso-speed figure with it."""
    frontier = pareto_frontier(points)
    if not frontier or not math.isfinite(speed):
        return None
    if not frontier[0].speed <= speed <= frontier[-1].speed:
        return None
    hit = any(math.isclose(p.speed, speed, rel_tol=1e-9, abs_tol=1e-9) for p in frontier)
    return AT_POINT if hit else BETWEEN_POINTS


def _by_concurrency(points: Iterable[Point]) -> tuple[list[float], list[float], list[float]]:
    groups: dict[int, list[Point]] = {}
    for p in _valid(points):
        groups.setdefault(p.concurrency, []).append(p)
    ns = sorted(groups)
    thr = [sum(p.throughput for p in groups[n]) / len(groups[n]) for n in ns]
    spd = [sum(p.speed for p in groups[n]) / len(groups[n]) for n in ns]
    return [float(n) for n in ns], thr, spd


def throughput_at_concurrency(points: Iterable[Point], concurrency: float) -> float | None:
    """Throughput per accelerator at `concurrency` agents (repeats averaged)."""
    ns, thr, _ = _by_concurrency(points)
    return _interpolate(ns, thr, float(concurrency))


def speed_at_concurrency(points: Iterable[Point], concurrency: float) -> float | None:
    ns, _, spd = _by_concurrency(points)
    return _interpolate(ns, spd, float(concurrency))


def single_agent(points: Iterable[Point]) -> tuple[int, float] | None:
    """(lowest measured N, its p25 speed): the single-agent speed when N is 1."""
    ns, _, spd = _by_concurrency(points)
    if not ns:
        return None
    return int(ns[0]), spd[0]


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b > 0 or not math.isfinite(a) or not math.isfinite(b):
        return None
    return a / b


def common_concurrencies(*sets: Iterable[Point]) -> list[int]:
    """Concurrencies every result measured (the ramp's 1, 2, 4, … are shared)."""
    common: set[int] | None = None
    for points in sets:
        ns = {p.concurrency for p in _valid(points)}
        common = ns if common is None else common & ns
    return sorted(common or ())


def speed_range(points: Iterable[Point]) -> tuple[float, float] | None:
    frontier = pareto_frontier(points)
    if not frontier:
        return None
    return frontier[0].speed, frontier[-1].speed
