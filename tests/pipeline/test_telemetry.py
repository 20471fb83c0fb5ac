"""Telemetry on the runner host. No GPU here: the `nvidia-smi` used below is a stand-in
script printing what the real tool prints for `--query-gpu ... --format=csv,noheader,nounits`
(a fake only because the hardware cannot run on this machine)."""

from __future__ import annotations

import time

from runner.telemetry import TelemetrySampler, parse_nvidia_smi

ROWS = "0, NVIDIA H200, 612.50, 97, 120000, 143771\n1, NVIDIA H200, 587.50, 95, 118000, 143771\n"


def _fake_tool(tmp_path) -> str:
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '{ROWS}'\n")
    script.chmod(0o755)
    return str(script)


def test_mean_power_over_a_window_sums_the_accelerators(tmp_path):
    sampler = TelemetrySampler(interval_s=0.05, tool=_fake_tool(tmp_path))
    start = time.perf_counter_ns()
    sampler.start()
    time.sleep(0.4)
    sampler.stop()
    window = sampler.window(start, time.perf_counter_ns())
    assert window["measured"] is True
    assert window["power_w"] == 1200.0 and window["accelerators"] == 2
    assert window["samples"] >= 2
    inventory = sampler.inventory()
    assert [a["name"] for a in inventory["accelerators"]] == ["NVIDIA H200", "NVIDIA H200"]


def test_without_nvidia_smi_power_is_not_measured_and_never_estimated(tmp_path):
    sampler = TelemetrySampler(tool=None)
    sampler.tool = None
    sampler.start()
    window = sampler.window(0, time.perf_counter_ns())
    assert window == {"measured": False, "reason": "not measured: no nvidia-smi on the runner host"}
    assert sampler.inventory()["measured"] is False


def test_a_virtual_time_trial_is_not_measured_even_with_a_tool(tmp_path):
    sampler = TelemetrySampler(interval_s=0.05, tool=_fake_tool(tmp_path))
    sampler.start()
    sampler.stop()
    assert sampler.window(0, 10**18, virtual=True)["measured"] is False


def test_unsupported_power_readings_are_kept_as_unknown():
    [sample] = parse_nvidia_smi("0, NVIDIA GH200, [N/A], 12, 100, 200\n", 5)
    assert (sample.power_w, sample.utilization_pct, sample.t_ns) == (None, 12.0, 5)
