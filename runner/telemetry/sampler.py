"""Accelerator telemetry on the runner host (no database access).

A background thread reads one source every `interval_s` between start() and stop(): NVML
first (energy counters, `nvidia-ml-py`), else `nvidia-smi`, else `amd-smi`, whichever
works on the host. Every sample carries a `time.perf_counter_ns()` stamp, the clock the
engine measures trials with, so a trial's energy is taken over exactly its measurement
window (`runner.telemetry.power.window_energy`). Without a working source the result is
"not measured" with the reasons — never an estimate (docs/verification.md "telemetry
(power)").
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Collection
from typing import Any

from runner.telemetry.power import GpuSample, window_energy
from runner.telemetry.sources import NvmlSource, SmiSource, Source, SourceError


def discover(
    *, nvml: Any = None, minors: Collection[int] | None = None
) -> tuple[Source | None, list[str]]:
    """The first source that works on this host, and why each one before it did not.

    `nvml` is the `pynvml` module to use (None: import the real one); `minors`: NVML reads
    only those GPUs (a launched server's grant). The `nvidia-smi` and `amd-smi` fallbacks
    read every accelerator of the host."""
    reasons: list[str] = []
    try:
        return NvmlSource.open(nvml, minors=minors), reasons
    except SourceError as exc:
        reasons.append(str(exc))
    for name in ("nvidia-smi", "amd-smi"):
        path = shutil.which(name)
        if path is not None:
            return SmiSource(name=name, tool=path), reasons
        reasons.append(f"no {name} on the runner host")
    return None, reasons


class TelemetrySampler:
    """Samples one accelerator source every `interval_s` between start() and stop().

    `source` fixes the source; `tool` is shorthand for an `nvidia-smi` at that path;
    neither: `discover()` picks one at start().
    """

    def __init__(
        self,
        *,
        interval_s: float = 1.0,
        source: Source | None = None,
        tool: str | None = None,
        nvml: Any = None,
    ) -> None:
        self.interval_s = interval_s
        if source is None and tool is not None:
            source = SmiSource(name="nvidia-smi", tool=tool)
        self.source = source
        self._nvml = nvml
        self._discovered = source is not None
        # the GPUs a launched server was granted, by device minor (set by the worker before
        # start(); None: every GPU the host lists)
        self.minors: Collection[int] | None = None
        self.samples: list[GpuSample] = []
        self.error = ""
        self.reasons: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def tool(self) -> str | None:
        return self.source.name if self.source is not None else None

    @property
    def available(self) -> bool:
        return self.source is not None and not self.error

    def sample_once(self) -> list[GpuSample]:
        assert self.source is not None
        return self.source.read()

    def start(self) -> None:
        if not self._discovered:
            self.source, self.reasons = discover(nvml=self._nvml, minors=self.minors)
            self._discovered = True
        if self.source is None:
            return
        try:
            first = self.sample_once()
        except SourceError as exc:
            self.error = str(exc)
            return
        if not first:
            self.error = f"{self.source.name} listed no accelerators"
            return
        self.samples.extend(first)
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                rows = self.sample_once()
            except SourceError:
                continue
            with self._lock:
                self.samples.extend(rows)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
            self._thread = None
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

    def not_measured_reason(self) -> str:
        if self.source is None:
            why = "; ".join(self.reasons) or "no accelerator telemetry on the runner host"
            return f"not measured: {why}"
        return f"not measured: {self.error}" if self.error else ""

    def inventory(self) -> dict[str, Any]:
        """What the host reports about its accelerators (for the telemetry consistency check)."""
        if not self.available or not self.samples:
            return {
                "measured": False,
                "reason": self.not_measured_reason() or "not measured: no sample",
                "accelerators": [],
            }
        with self._lock:
            first_t = self.samples[0].t_ns
            rows = [s for s in self.samples if s.t_ns == first_t]
        return {
            "measured": True,
            "tool": self.tool,
            "accelerators": [
                {
                    "index": s.index,
                    "name": s.name,
                    "uuid": s.uuid,
                    "memory_total_mib": s.memory_total_mib,
                    "memory_used_mib": s.memory_used_mib,
                    "energy_counter": s.energy_mj is not None,
                }
                for s in rows
            ],
        }

    def window(self, start_ns: int, end_ns: int, *, virtual: bool = False) -> dict[str, Any]:
        """Measured power and energy of the accelerators in use inside [start, end)."""
        if virtual:
            return {"measured": False, "reason": "not measured: simulated on virtual time"}
        if not self.available:
            return {"measured": False, "reason": self.not_measured_reason()}
        with self._lock:
            samples = list(self.samples)
        assert self.tool is not None
        return window_energy(samples, start_ns, end_ns, interval_s=self.interval_s, tool=self.tool)
