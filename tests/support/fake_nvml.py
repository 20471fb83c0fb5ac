"""A FAKE NVML (`pynvml`-compatible), for tests only.

Why a fake: NVML is the NVIDIA driver's library and needs an NVIDIA GPU; the pool host that
runs the tests has none (and the real `pynvml` answers "NVML Shared Library Not Found"
here). This class implements only the calls `runner.telemetry.sources.NvmlSource` makes,
with the units NVML uses (energy in millijoules since "driver load", power in milliwatts,
memory in bytes), so the code under test is the real reader and the real window maths.
`benchmarks/gpu_telemetry.py` checks the real library against `nvidia-smi` on a GPU host.

Each device draws a constant power; its energy counter is that power integrated on
`time.perf_counter_ns()` (the clock the sampler stamps with), or on a clock the test
sets by hand.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


@dataclass
class FakeDevice:
    name: str = "NVIDIA H200"
    power_w: float = 500.0
    memory_used_mib: float = 80_000.0
    memory_total_mib: float = 143_771.0
    utilization_pct: float = 90.0
    energy_supported: bool = True
    # joules added to the counter at "driver load", so a delta, not the absolute, is used
    energy_offset_j: float = 123_456.0
    # set to simulate a driver reload: the counter starts again from 0 at this time (ns)
    reset_at_ns: int | None = None


@dataclass
class FakeNvml:
    devices: list[FakeDevice] = field(default_factory=lambda: [FakeDevice()])
    clock: Callable[[], int] = time.perf_counter_ns
    fail_init: bool = False
    calls: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.t0 = self.clock()

    # --- the pynvml calls NvmlSource uses ------------------------------------------
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.fail_init:
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        return self.devices[index]

    def nvmlDeviceGetName(self, handle: FakeDevice) -> bytes:
        return handle.name.encode()  # older pynvml returns bytes; the reader decodes

    def nvmlDeviceGetUUID(self, handle: FakeDevice) -> str:
        return f"GPU-fake-{self.devices.index(handle)}"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeDevice) -> int:
        if not handle.energy_supported:
            raise NVMLError_NotSupported("Not Supported")
        now = self.clock()
        since = self.t0
        offset = handle.energy_offset_j
        if handle.reset_at_ns is not None and now >= handle.reset_at_ns:
            since, offset = handle.reset_at_ns, 0.0
        return int((offset + handle.power_w * (now - since) / 1e9) * 1000)

    def nvmlDeviceGetPowerUsage(self, handle: FakeDevice) -> int:
        return int(handle.power_w * 1000)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeDevice) -> SimpleNamespace:
        return SimpleNamespace(
            used=int(handle.memory_used_mib * 2**20), total=int(handle.memory_total_mib * 2**20)
        )

    def nvmlDeviceGetUtilizationRates(self, handle: FakeDevice) -> SimpleNamespace:
        return SimpleNamespace(gpu=handle.utilization_pct, memory=0)


class ManualClock:
    """A clock the test advances; the fake NVML and the sampler's stamps read it."""

    def __init__(self, start_ns: int = 10**12) -> None:
        self.now = start_ns

    def __call__(self) -> int:
        return self.now
