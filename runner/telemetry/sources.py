"""Where accelerator samples come from: NVML, `nvidia-smi`, `amd-smi`.

Each source has a `name` and `read() -> list[GpuSample]`; `read` raises `SourceError`
when the tool fails. NVML is read through `nvidia-ml-py` (`pynvml`, pinned in
requirements.txt), or through a stand-in with the same calls that a test passes; a host
without the NVIDIA driver gets "not measured" with NVML's own error (`pynvml.NVMLError` at
`nvmlInit`), never an estimate.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Collection
from typing import Any, Protocol

import pynvml

from runner.telemetry.power import GpuSample

NVIDIA_QUERY = "index,name,power.draw,utilization.gpu,memory.used,memory.total"
AMD_ARGS = ("metric", "--power", "--usage", "--mem-usage", "--json")


class SourceError(Exception):
    """The tool could not be read (missing library, failing command, no accelerator)."""


class Source(Protocol):
    name: str

    def read(self) -> list[GpuSample]: ...


def _num(text: str) -> float | None:
    text = text.strip()
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def parse_nvidia_smi(text: str, t_ns: int) -> list[GpuSample]:
    """Rows of `nvidia-smi --query-gpu=NVIDIA_QUERY --format=csv,noheader,nounits`."""
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


_MIB = {
    "b": 1 / 2**20,
    "kb": 1 / 1024,
    "kib": 1 / 1024,
    "mb": 1.0,
    "mib": 1.0,
    "gb": 1024.0,
    "gib": 1024.0,
}


def _amd_value(value: Any, *, mib: bool = False) -> float | None:
    """A number from amd-smi's JSON: 550, "550 W", {"value": 550, "unit": "W"}; "N/A" → None."""
    unit = ""
    if isinstance(value, dict):
        value, unit = value.get("value"), str(value.get("unit") or "")
    if isinstance(value, str):
        head, _, tail = value.strip().partition(" ")
        value, unit = head, unit or tail
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if mib:
        number *= _MIB.get(unit.strip().lower(), 1.0)
    return number


def _first(mapping: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in mapping and mapping[key] not in (None, "N/A"):
            return mapping[key]
    return None


def parse_amd_smi(text: str, t_ns: int) -> list[GpuSample]:
    """`amd-smi metric --power --usage --mem-usage --json`: a list of GPUs (or, in newer
    ROCm, {"gpu_data": [...]}); socket power in W (`socket_power`, older
    `average_socket_power` / `current_socket_power`), GFX activity in %, VRAM in MB."""
    data = json.loads(text)
    if isinstance(data, dict):
        data = data.get("gpu_data") or []
    samples = []
    for row in data if isinstance(data, list) else []:
        if not isinstance(row, dict) or not isinstance(row.get("gpu"), int):
            continue
        power = row.get("power") or {}
        usage = row.get("usage") or {}
        mem = row.get("mem_usage") or {}
        keys = ("socket_power", "current_socket_power", "average_socket_power")
        samples.append(
            GpuSample(
                t_ns=t_ns,
                index=row["gpu"],
                name=str(
                    row.get("market_name")
                    or row.get("asic", {}).get("market_name", "")
                    or f"AMD GPU {row['gpu']}"
                ),
                power_w=_amd_value(_first(power, keys)),
                utilization_pct=_amd_value(_first(usage, ("gfx_activity", "gfx_usage"))),
                memory_used_mib=_amd_value(mem.get("used_vram"), mib=True),
                memory_total_mib=_amd_value(mem.get("total_vram"), mib=True),
            )
        )
    return samples


class SmiSource:
    """One command-line tool run per sample (`nvidia-smi` or `amd-smi`)."""

    def __init__(self, *, name: str, tool: str) -> None:
        self.name = name
        self.tool = tool

    def read(self) -> list[GpuSample]:
        if self.name == "amd-smi":
            args, parse = [self.tool, *AMD_ARGS], parse_amd_smi
        else:
            args = [self.tool, f"--query-gpu={NVIDIA_QUERY}", "--format=csv,noheader,nounits"]
            parse = parse_nvidia_smi
        before = time.perf_counter_ns()
        try:
            out = subprocess.run(
                args, capture_output=True, text=True, timeout=10, check=True
            ).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise SourceError(f"{self.name} failed: {exc}"[:300]) from exc
        after = time.perf_counter_ns()
        try:
            return parse(out, (before + after) // 2)
        except ValueError as exc:  # amd-smi printed something that is not JSON
            raise SourceError(f"{self.name} output unreadable: {exc}"[:300]) from exc


class NvmlSource:
    """NVML through `pynvml`: energy counter (mJ), power (mW), memory and utilisation.

    `lib` is the `pynvml` module or anything with the same calls; `open()` uses the real
    one when none is given and raises SourceError when NVML cannot start. `clock`
    stamps the samples (the engine's `perf_counter_ns` unless a test passes its own).
    """

    name = "nvml"

    def __init__(self, lib: Any, *, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.lib = lib
        self.clock = clock
        self.handles: list[tuple[int, Any, str, str]] = []
        self.energy_supported: dict[int, bool] = {}

    @classmethod
    def open(
        cls,
        lib: Any = None,
        *,
        clock: Callable[[], int] = time.perf_counter_ns,
        minors: Collection[int] | None = None,
    ) -> NvmlSource:
        """``minors``: only the GPUs with these device minors (/dev/nvidiaN), the ones a
        launched server was granted (runner/launchers/devices.py); None: every GPU."""
        if lib is None:
            lib = pynvml
        source = cls(lib, clock=clock)
        try:
            lib.nvmlInit()
            for i in range(int(lib.nvmlDeviceGetCount())):
                handle = lib.nvmlDeviceGetHandleByIndex(i)
                if minors is not None and int(lib.nvmlDeviceGetMinorNumber(handle)) not in minors:
                    continue
                source.handles.append(
                    (
                        i,
                        handle,
                        _text(lib.nvmlDeviceGetName(handle)),
                        _text(lib.nvmlDeviceGetUUID(handle)),
                    )
                )
        except Exception as exc:  # pynvml.NVMLError and its many subclasses
            raise SourceError(f"NVML unavailable: {exc}"[:300]) from exc
        if not source.handles:
            granted = "" if minors is None else f" of the granted minors {sorted(minors)}"
            raise SourceError(f"NVML listed no accelerators{granted}")
        return source

    def _optional(self, call: str, handle: Any) -> Any:
        try:
            return getattr(self.lib, call)(handle)
        except Exception:  # NVML_ERROR_NOT_SUPPORTED on older boards
            return None

    def read(self) -> list[GpuSample]:
        out = []
        before = self.clock()
        for index, handle, name, uuid in self.handles:
            energy = None
            if self.energy_supported.get(index, True):
                energy = self._optional("nvmlDeviceGetTotalEnergyConsumption", handle)
                self.energy_supported[index] = energy is not None
            power_mw = self._optional("nvmlDeviceGetPowerUsage", handle)
            memory = self._optional("nvmlDeviceGetMemoryInfo", handle)
            util = self._optional("nvmlDeviceGetUtilizationRates", handle)
            out.append(
                GpuSample(
                    t_ns=0,
                    index=index,
                    name=name,
                    uuid=uuid,
                    power_w=None if power_mw is None else float(power_mw) / 1000.0,
                    utilization_pct=None if util is None else float(util.gpu),
                    memory_used_mib=None if memory is None else memory.used / 2**20,
                    memory_total_mib=None if memory is None else memory.total / 2**20,
                    energy_mj=None if energy is None else float(energy),
                )
            )
        stamp = (before + self.clock()) // 2
        for sample in out:
            sample.t_ns = stamp
        return out

    def close(self) -> None:
        try:
            self.lib.nvmlShutdown()
        except Exception:  # already shut down, or never started
            pass


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
