"""Power coverage, gaps and the accelerator count. No GPU here: the nvidia-smi rows are
written by the test (the parser and the window maths are the code under test)."""

from __future__ import annotations

import pytest

from agentperf.verification.checks import TrialData
from agentperf.verification.measurement import check_accelerators, check_power
from runner.telemetry import TelemetrySampler, parse_nvidia_smi, power_coverage

S = 1_000_000_000


def sampler_with(stamps_s: list[float], watts: float = 500.0) -> TelemetrySampler:
    sampler = TelemetrySampler(interval_s=1.0, tool="/bin/true")
    for t in stamps_s:
        rows = f"0, NVIDIA H200, {watts}, 90, 70000, 143771\n1, NVIDIA H200, {watts}, 88, 70000, 143771"
        sampler.samples.extend(parse_nvidia_smi(rows, int(t * S)))
    return sampler


def test_one_sample_a_second_covers_the_whole_window():
    coverage, gap = power_coverage([int(t * S) for t in range(0, 11)], 0, 10 * S, 1.0)
    assert coverage == pytest.approx(1.0) and gap == pytest.approx(1.0)


def test_a_four_second_hole_fails_the_power_check():
    window = sampler_with([0, 1, 2, 3, 8, 9]).window(0, 10 * S)
    assert window["max_gap_s"] == pytest.approx(5.0)
    assert window["energy_j"] == pytest.approx(1000.0 * 10)  # 2 × 500 W, held at the edges
    check = check_power([TrialData(index=0, concurrency=1, telemetry=window)])
    assert check["status"] == "fail" and "gap" in check["summary"]


def test_complete_power_passes_and_states_method_and_denominator():
    window = sampler_with([t * 0.5 for t in range(21)]).window(0, 10 * S)
    check = check_power([TrialData(index=0, concurrency=1, telemetry=window)])
    assert check["status"] == "pass", check
    assert "board power" in check["summary"] and "integrated" in check["summary"]


def test_unmeasured_power_is_a_warning_never_a_pass():
    trial = TrialData(
        index=0,
        concurrency=1,
        telemetry={"measured": False, "reason": "not measured: no nvidia-smi"},
    )
    check = check_power([trial])
    assert check["status"] == "warn" and "not measured" in check["summary"]


def test_accelerators_in_use_must_equal_the_claim():
    inventory = sampler_with([0.0]).inventory()
    assert check_accelerators(2, inventory, [])["status"] == "pass"
    check = check_accelerators(8, inventory, [])
    assert check["status"] == "fail" and "claims 8" in check["summary"]
    assert check_accelerators(8, {"measured": False, "reason": "no tool"}, [])["status"] == "warn"
