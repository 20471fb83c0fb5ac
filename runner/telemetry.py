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
                {"index": s.index, "name": s.name, "memory_total_mib": s.memory_total_mib}
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
        return {
            "measured": True,
            "tool": "nvidia-smi",
            "power_w": sum(totals) / len(totals),
            "samples": len(totals),
            "accelerators": len({s.index for s in inside}),
            "utilization_pct": sum(utils) / len(utils) if utils else None,
        }
