"""Accelerator telemetry on the runner host (no database access).

`nvidia-smi` is sampled in a background thread when it is on PATH; every sample carries a
`time.perf_counter_ns()` stamp, the clock the engine measures trials with, so a trial's
mean power is taken over exactly its measurement window. Without a tool the result is
"not measured" with the reason — never an estimate (DESIGN.md §4).
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

QUERY = "index,name,power.draw,utilization.gpu,memory.used,memory.total"


@dataclass(slots=True)
class GpuSample:
    t_ns: int
    index: int
    name: str
    power_w: float | None
    utilization_pct: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None


def _num(text: str) -> float | None:
    text = text.strip()
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def parse_nvidia_smi(text: str, t_ns: int) -> list[GpuSample]:
    """Rows of `nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits`."""
    samples = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 6 or not parts[0].isdigit():
            continue
        samples.append(
            GpuSample(
                t_ns=t_ns,
                index=int(parts[0]),
                name=parts[1],
                power_w=_num(parts[2]),
                utilization_pct=_num(parts[3]),
                memory_used_mib=_num(parts[4]),
                memory_total_mib=_num(parts[5]),
            )
        )
    return samples


class TelemetrySampler:
    """Samples `nvidia-smi` every `interval_s` between start() and stop()."""

    def __init__(self, *, interval_s: float = 1.0, tool: str | None = None) -> None:
        self.interval_s = interval_s
        self.tool = tool if tool is not None else shutil.which("nvidia-smi")
        self.samples: list[GpuSample] = []
        self.error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def available(self) -> bool:
        return self.tool is not None and not self.error

    def sample_once(self) -> list[GpuSample]:
        assert self.tool is not None
        before = time.perf_counter_ns()
        out = subprocess.run(
            [self.tool, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        after = time.perf_counter_ns()
        return parse_nvidia_smi(out, (before + after) // 2)

    def start(self) -> None:
        if self.tool is None:
            return
        try:
            first = self.sample_once()
        except (OSError, subprocess.SubprocessError) as exc:
            self.error = f"nvidia-smi failed: {exc}"[:300]
            return
        if not first:
            self.error = "nvidia-smi listed no accelerators"
            return
        self.samples.extend(first)
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                rows = self.sample_once()
            except (OSError, subprocess.SubprocessError):
                continue
            with self._lock:
                self.samples.extend(rows)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def not_measured_reason(self) -> str:
        if self.tool is None:
            return "not measured: no nvidia-smi on the runner host"
        return f"not measured: {self.error}" if self.error else ""

    def inventory(self) -> dict[str, Any]:
        """What the host reports about its accelerators (for the telemetry consistency check)."""
        if not self.available:
            return {"measured": False, "reason": self.not_measured_reason(), "accelerators": []}
        with self._lock:
            first_t = self.samples[0].t_ns
            rows = [s for s in self.samples if s.t_ns == first_t]
        return {
            "measured": True,
            "tool": "nvidia-smi",
            "accelerators": [
                {
                    "index": s.index,
                    "name": s.name,
                    "memory_total_mib": s.memory_total_mib,
                    "memory_used_mib": s.memory_used_mib,
                }
                for s in rows
            ],
        }

    def window(self, start_ns: int, end_ns: int, *, virtual: bool = False) -> dict[str, Any]:
        """Mean total power (sum over accelerators) and utilisation inside [start, end)."""
        if virtual:
            return {"measured": False, "reason": "not measured: simulated on virtual time"}
        if not self.available:
            return {"measured": False, "reason": self.not_measured_reason()}
        with self._lock:
            inside = [s for s in self.samples if start_ns <= s.t_ns < end_ns]
        stamps = sorted({s.t_ns for s in inside})
        totals = []
        for t in stamps:
            row = [s.power_w for s in inside if s.t_ns == t]
            if row and all(p is not None for p in row):
                totals.append(sum(p for p in row if p is not None))
        if not totals:
            return {"measured": False, "reason": "not measured: no power sample in the window"}
        utils = [s.utilization_pct for s in inside if s.utilization_pct is not None]
        powered = [t for t in stamps if all(s.power_w is not None for s in inside if s.t_ns == t)]
        coverage, max_gap_s = power_coverage(powered, start_ns, end_ns, self.interval_s)
        return {
            "measured": True,
            "tool": "nvidia-smi",
            "power_w": sum(totals) / len(totals),
            "energy_j": integrate_power(powered, totals, start_ns, end_ns),
            "method": "integrated sampled power (nvidia-smi power.draw; no energy counter read)",
            "denominator": "accelerator board power (sum over the host's accelerators), not "
            "wall power",
            "coverage": coverage,
            "max_gap_s": max_gap_s,
            "samples": len(totals),
            "accelerators": len({s.index for s in inside}),
            "utilization_pct": sum(utils) / len(utils) if utils else None,
        }


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
