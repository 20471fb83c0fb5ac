"""Telemetry on the runner host. No GPU here, so two stand-ins, each a fake only because
the hardware cannot run on this machine:

- NVML is `tests/support/fake_nvml.FakeNvml`, a FAKE `pynvml` with the calls the reader
  makes (energy counter in mJ, power in mW); the real `pynvml` is installed but finds no
  driver here.
- `nvidia-smi` is a script printing what the real tool prints for
  `--query-gpu ... --format=csv,noheader,nounits`.

The readers, the sampler thread and the window maths are the real code under test.
"""

from __future__ import annotations

import json
import time

import pytest

from runner.telemetry import (
    NvmlSource,
    SmiSource,
    TelemetrySampler,
    counter_delta,
    discover,
    parse_amd_smi,
    parse_nvidia_smi,
    window_energy,
)
from tests.support.fake_nvml import FakeDevice, FakeNvml, ManualClock

ROWS = "0, NVIDIA H200, 612.50, 97, 120000, 143771\n1, NVIDIA H200, 587.50, 95, 118000, 143771\n"
S = 1_000_000_000


def _fake_tool(tmp_path) -> str:
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '{ROWS}'\n")
    script.chmod(0o755)
    return str(script)


def _nvml_samples(fake: FakeNvml, clock: ManualClock, stamps_s: list[float]):
    source = NvmlSource.open(fake, clock=clock)
    samples = []
    for t in stamps_s:
        clock.now = int(t * S)
        samples.extend(source.read())
    return samples


def _readings_after(sampler: TelemetrySampler, t_ns: int) -> int:
    return len({s.t_ns for s in list(sampler.samples) if s.t_ns > t_ns})


def _window_of_readings(sampler: TelemetrySampler) -> tuple[int, int]:
    """Start the sampler and stop it once readings bracket a window of three readings: the
    window's edges follow the sampler's own events, never a sleep of a guessed length."""
    sampler.start()  # its first reading is taken before start() returns
    start = time.perf_counter_ns()
    _wait_for(lambda: _readings_after(sampler, start) >= 3)
    end = time.perf_counter_ns()
    _wait_for(lambda: _readings_after(sampler, end) >= 1)
    sampler.stop()
    return start, end


def test_mean_power_over_a_window_sums_the_accelerators(tmp_path):
    sampler = TelemetrySampler(interval_s=0.25, tool=_fake_tool(tmp_path))
    start, end = _window_of_readings(sampler)
    window = sampler.window(start, end)
    assert window["measured"] is True and window["tool"] == "nvidia-smi"
    assert window["power_w"] == 1200.0 and window["accelerators"] == 2
    assert window["samples"] >= 2
    assert window["method"].startswith("integrated sampled power")
    inventory = sampler.inventory()
    assert [a["name"] for a in inventory["accelerators"]] == ["NVIDIA H200", "NVIDIA H200"]


def test_nvml_energy_delta_is_per_accelerator_in_use_and_leaves_idle_ones_out():
    clock = ManualClock()
    fake = FakeNvml(
        devices=[
            FakeDevice(power_w=600.0),
            FakeDevice(power_w=400.0),
            FakeDevice(power_w=60.0, memory_used_mib=10.0),  # idle on the same host
        ],
        clock=clock,
    )
    samples = _nvml_samples(fake, clock, [999.5 + 1.0 * k for k in range(0, 123)])
    window = window_energy(samples, 1000 * S, 1120 * S, interval_s=1.0, tool="nvml")
    assert window["method"].startswith("energy counter delta") and window["tool"] == "nvml"
    assert window["accelerators"] == 2 and window["accelerators_on_host"] == 3
    assert [a["uuid"] for a in window["accelerators_used"]] == ["GPU-fake-0", "GPU-fake-1"]
    assert window["energy_j"] == pytest.approx(1000.0 * 120, rel=1e-6)
    assert window["power_w"] == pytest.approx(1000.0, rel=1e-6)
    per = {a["index"]: a["energy_j"] for a in window["per_accelerator"]}
    assert per == {0: pytest.approx(600.0 * 120, rel=1e-6), 1: pytest.approx(400.0 * 120, rel=1e-6)}
    assert window["coverage"] == pytest.approx(1.0) and window["max_gap_s"] == 0.0
    assert "2 accelerators in use" in window["denominator"]
    assert abs(window["cross_check"]["difference_pct"]) < 0.01


def test_counter_readings_far_apart_still_give_the_exact_energy_between_them():
    """A counter loses nothing between readings: one reading every 7 s is exact inside,
    and the edges are interpolated (the power is constant here, so exactly)."""
    clock = ManualClock()
    fake = FakeNvml(devices=[FakeDevice(power_w=700.0)], clock=clock)
    samples = _nvml_samples(fake, clock, [3.0, 10.0, 17.0, 24.0])
    window = window_energy(samples, 5 * S, 20 * S, interval_s=7.0, tool="nvml")
    assert window["energy_j"] == pytest.approx(700.0 * 15, rel=1e-4)
    assert window["coverage"] == pytest.approx(1.0)


def test_a_window_the_readings_do_not_reach_is_partly_uncovered_never_extrapolated():
    readings = [(2 * S, 0.0), (8 * S, 6000.0)]  # 1 W, mJ
    joules, lo, hi = counter_delta(readings, 0, 10 * S) or (0, 0, 0)
    assert (joules, lo, hi) == (pytest.approx(6.0), 2 * S, 8 * S)


def test_a_reset_counter_falls_back_to_integrating_nvml_power():
    clock = ManualClock()
    fake = FakeNvml(devices=[FakeDevice(power_w=500.0, reset_at_ns=1050 * S)], clock=clock)
    samples = _nvml_samples(fake, clock, [999.0 + 0.5 * k for k in range(0, 250)])
    window = window_energy(samples, 1000 * S, 1100 * S, interval_s=0.5, tool="nvml")
    assert window["method"].startswith("integrated sampled power (nvml")
    assert window["power_w"] == pytest.approx(500.0)
    assert "cross_check" not in window


def test_boards_without_an_energy_counter_are_integrated_and_say_so():
    clock = ManualClock()
    fake = FakeNvml(devices=[FakeDevice(power_w=300.0, energy_supported=False)], clock=clock)
    samples = _nvml_samples(fake, clock, [float(t) for t in range(0, 12)])
    window = window_energy(samples, 1 * S, 10 * S, interval_s=1.0, tool="nvml")
    assert window["method"].startswith("integrated") and window["power_w"] == 300.0
    assert all(s.energy_mj is None for s in samples)


def _wait_for(condition, limit_s: float = 60.0) -> None:
    """Poll `condition` until it holds; a limit only so that a broken sampler fails the test."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, "the sampler stopped reading"
        time.sleep(0.01)


def test_the_sampler_thread_reads_nvml_on_the_engines_clock():
    fake = FakeNvml(devices=[FakeDevice(power_w=250.0), FakeDevice(power_w=250.0)])
    sampler = TelemetrySampler(interval_s=0.05, nvml=fake)
    start, end = _window_of_readings(sampler)
    window = sampler.window(start, end)
    assert sampler.tool == "nvml" and window["tool"] == "nvml"
    assert window["power_w"] == pytest.approx(500.0, rel=0.01)
    assert window["coverage"] == pytest.approx(1.0)
    assert sampler.inventory()["accelerators"][0]["energy_counter"] is True
    assert "nvmlShutdown" in fake.calls


def test_without_nvml_discovery_falls_back_to_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    _fake_tool(tmp_path)
    source, reasons = discover(nvml=FakeNvml(fail_init=True))
    assert isinstance(source, SmiSource) and source.name == "nvidia-smi"
    assert reasons == ["NVML unavailable: NVML Shared Library Not Found"]


def test_without_any_tool_power_is_not_measured_and_never_estimated(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    sampler = TelemetrySampler(nvml=FakeNvml(fail_init=True))
    sampler.start()
    window = sampler.window(0, time.perf_counter_ns())
    assert window == {
        "measured": False,
        "reason": "not measured: NVML unavailable: NVML Shared Library Not Found; "
        "no nvidia-smi on the runner host; no amd-smi on the runner host",
    }
    assert sampler.inventory()["measured"] is False


def test_the_real_pynvml_on_this_gpu_less_host_reports_why(tmp_path, monkeypatch):
    """The real library, installed from requirements.txt, finds no driver here."""
    monkeypatch.setenv("PATH", str(tmp_path))
    source, reasons = discover()
    assert source is None and reasons[0].startswith("NVML unavailable")


def test_a_virtual_time_trial_is_not_measured_even_with_a_tool(tmp_path):
    sampler = TelemetrySampler(interval_s=0.05, tool=_fake_tool(tmp_path))
    sampler.start()
    sampler.stop()
    assert sampler.window(0, 10**18, virtual=True)["measured"] is False


def test_unsupported_power_readings_are_kept_as_unknown():
    [sample] = parse_nvidia_smi("0, NVIDIA GH200, [N/A], 12, 100, 200\n", 5)
    assert (sample.power_w, sample.utilization_pct, sample.t_ns) == (None, 12.0, 5)


AMD_OLD = [  # ROCm 6.0-6.2 shape: bare numbers, "N/A" strings
    {
        "gpu": 0,
        "power": {"average_socket_power": 512, "gfx_voltage": "N/A"},
        "usage": {"gfx_activity": 93},
        "mem_usage": {"total_vram": 196592, "used_vram": 180000},
    },
]
AMD_NEW = {  # ROCm 6.3+: {"value", "unit"} objects under "gpu_data"
    "gpu_data": [
        {
            "gpu": 0,
            "power": {"socket_power": {"value": 640, "unit": "W"}},
            "usage": {"gfx_activity": {"value": 97, "unit": "%"}},
            "mem_usage": {
                "total_vram": {"value": 192, "unit": "GB"},
                "used_vram": {"value": 150, "unit": "GB"},
            },
        },
        {"gpu": 1, "power": {"socket_power": "N/A"}, "usage": {}, "mem_usage": {}},
    ]
}


def test_amd_smi_json_is_read_in_both_shapes():
    [old] = parse_amd_smi(json.dumps(AMD_OLD), 7)
    assert (old.power_w, old.utilization_pct, old.memory_used_mib) == (512.0, 93.0, 180000.0)
    new, missing = parse_amd_smi(json.dumps(AMD_NEW), 7)
    assert (new.power_w, new.utilization_pct, new.memory_used_mib) == (640.0, 97.0, 150 * 1024)
    assert missing.power_w is None and missing.name == "AMD GPU 1"


def test_amd_smi_power_is_integrated_with_the_same_coverage_rule(tmp_path):
    script = tmp_path / "amd-smi"
    script.write_text(f"#!/bin/sh\ncat <<'JSON'\n{json.dumps(AMD_OLD)}\nJSON\n")
    script.chmod(0o755)
    sampler = TelemetrySampler(interval_s=0.25, source=SmiSource(name="amd-smi", tool=str(script)))
    start, end = _window_of_readings(sampler)
    window = sampler.window(start, end)
    assert window["tool"] == "amd-smi" and window["power_w"] == 512.0
    assert window["method"].startswith("integrated sampled power (amd-smi")
    assert window["coverage"] > 0.9
