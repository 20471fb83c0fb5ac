"""Accelerator telemetry on the runner host: sources (NVML, nvidia-smi, amd-smi), the
sampler thread, and energy over a trial's window (docs/verification.md "telemetry")."""

from runner.telemetry.power import (
    GpuSample,
    counter_delta,
    integrate_power,
    power_coverage,
    window_energy,
)
from runner.telemetry.sampler import TelemetrySampler, discover
from runner.telemetry.sources import (
    NvmlSource,
    SmiSource,
    SourceError,
    parse_amd_smi,
    parse_nvidia_smi,
)

__all__ = [
    "GpuSample",
    "NvmlSource",
    "SmiSource",
    "SourceError",
    "TelemetrySampler",
    "counter_delta",
    "discover",
    "integrate_power",
    "parse_amd_smi",
    "parse_nvidia_smi",
    "power_coverage",
    "window_energy",
]
