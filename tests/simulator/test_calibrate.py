"""`python -m agentperf.simulator calibrate`: the frontier is read between engine-measured
trials, and the report compares it with published points."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentperf.simulator.calibrate import SweepPoint, frontier_at, load_points, report
from agentperf.simulator.profile import load_profile


def _pt(n: int, speed: float, tput: float, power: float | None = None) -> SweepPoint:
    return SweepPoint(
        concurrency=n,
        requests=100,
        p25_speed=speed,
        ttft_p75_s=0.1,
        throughput_per_accelerator=tput,
        output_tok_s=0.0,
        total_tok_s=0.0,
        modelled_power_w_per_accelerator=power,
    )


SWEEP = [
    _pt(1, 900, 300),
    _pt(1024, 300, 120_000),
    _pt(2048, 200, 200_000),
    _pt(4096, 100, 300_000),
]


def test_the_frontier_at_a_speed_is_linear_between_the_two_trials_that_bracket_it():
    assert frontier_at(SWEEP, 250) == pytest.approx(160_000)
    assert frontier_at(SWEEP, 200) == pytest.approx(200_000)
    assert frontier_at(SWEEP, 150) == pytest.approx(250_000)


def test_a_speed_outside_the_sweep_is_not_bracketed():
    assert frontier_at(SWEEP, 50) is None
    assert frontier_at(SWEEP, 1000) is None


def test_the_report_gives_percent_errors_against_published_points(tmp_path: Path):
    points = tmp_path / "points.yaml"
    points.write_text("single_agent: 1000\ntwo_agents: 800\nfrontier: {250: 200000}\n")
    pub = load_points(points)
    sweep = [SWEEP[0], _pt(2, 880, 500), *SWEEP[1:]]
    text = report(load_profile("tiny"), sweep, at=[250, 50], published=pub)
    assert "single agent: 900 tok/s (published 1000: -10.0 %)" in text
    assert "two agents: 880 tok/s (published 800: +10.0 %)" in text
    assert (
        "at 250 tok/s per agent: 160,000 tok/s per accelerator (published 200,000: -20.0 %)" in text
    )
    assert "at 50 tok/s per agent: not bracketed by the sweep" in text


def test_modelled_power_is_labelled_modelled_and_absent_when_not_modelled():
    gb300 = load_profile("gb300-nvl72-dsv41-flash")
    text = report(gb300, [_pt(1024, 300, 120_000, power=1000.0)], at=[])
    assert "W/acc (modelled)" in text and "agents/MW (modelled)" in text
    # 1,024 agents on 72 GPUs at 1 kW each: 14,222 agents per MW; 120 tok/J
    assert "14222" in text and "120.0" in text
    assert "modelled" not in report(load_profile("tiny"), SWEEP, at=[])


def test_a_points_file_with_an_unknown_field_is_refused(tmp_path: Path):
    bad = tmp_path / "p.yaml"
    bad.write_text("single_agent: 1\nwhatever: 2\n")
    with pytest.raises(ValueError, match="whatever"):
        load_points(bad)
