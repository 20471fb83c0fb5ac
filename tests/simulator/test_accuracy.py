"""A twin profile against the figures it never saw (agentperf/simulator/accuracy.py;
docs/simulator.md "Accuracy"): the status rules, the MAPE, the records each bundled profile
is judged by, and the `holdout` command's refusal to call a fitted point held out."""

from __future__ import annotations

import json

import pytest

from agentperf.simulator.__main__ import main
from agentperf.simulator.accuracy import (
    ADMITTED,
    LEAVE_ONE_OUT,
    MEASURED,
    PUBLISHED,
    QUARANTINED,
    HeldOutFigure,
    ProfileAccuracy,
    accuracy_table,
    profile_accuracy,
)
from agentperf.simulator.calibrate import SweepPoint, held_out_figures
from agentperf.simulator.profile import PROFILES_DIR, available_profiles


def _fig(reference: float, simulated: float | None) -> HeldOutFigure:
    return HeldOutFigure(
        figure="x", unit="tok/s", reference=reference, simulated=simulated, basis=PUBLISHED
    )


def _acc(*figures: HeldOutFigure) -> ProfileAccuracy:
    return ProfileAccuracy(profile="p", figures=figures, sources=())


def test_admitted_only_when_every_held_out_figure_is_within_25_percent():
    inside = _acc(_fig(100, 124.9), _fig(100, 75.1))
    assert inside.status == ADMITTED and inside.within_count == 2
    assert inside.mape == pytest.approx((0.249 + 0.249) / 2)
    one_out = _acc(_fig(100, 124.9), _fig(100, 126))
    assert one_out.status == QUARANTINED
    assert one_out.reason == "1 of 2 held-out figures outside ±25%"


def test_a_figure_never_reached_is_a_miss_and_left_out_of_the_mape():
    acc = _acc(_fig(100, 110), _fig(95_000, None))
    assert acc.status == QUARANTINED
    assert acc.mape == pytest.approx(0.10)
    assert "1 never reached" in acc.reason
    dumped = acc.dump()
    assert dumped["figures"][1]["error"] is None and dumped["figures"][1]["within"] is False


def test_no_figure_is_not_a_pass():
    acc = _acc()
    assert acc.status == QUARANTINED and acc.mape is None
    assert acc.reason.startswith("no held-out figure")


def test_every_bundled_profile_is_judged_by_its_committed_records():
    table = {acc.profile: acc for acc in accuracy_table()}
    assert set(table) == set(available_profiles())
    # the fitted GB300 profile: every published point was fitted, so its hold-out is the
    # fit's leave-one-out, read from its record
    gb300 = table["gb300-nvl72-dsv41-flash"]
    record = json.loads((PROFILES_DIR / "gb300-nvl72-dsv41-flash.fit.json").read_text())
    assert [f.basis for f in gb300.figures] == [LEAVE_ONE_OUT] * len(record["points"])
    for f, p in zip(gb300.figures, record["points"], strict=True):
        assert f.error == pytest.approx(p["loo_error_pct"] / 100, rel=1e-3, abs=1e-4)
    # the llama.cpp twin: 18 figures measured against the real server on this CPU
    cpu = table["local-cpu-llamacpp"]
    assert len(cpu.figures) == 18 and {f.basis for f in cpu.figures} == {MEASURED}
    # the predictive profiles: the published figures they were never fitted to
    assert [f.figure for f in table["gb300-nvl72-dsv41-flash-oct08"].figures] == [
        "1 agent",
        "2 agents",
        "at 220 tok/s per agent",
        "at 82 tok/s per agent",
    ]
    assert [f.figure for f in table["vr-nvl72-dsv41-flash"].figures] == [
        "1 agent",
        "at 260 tok/s per agent",
        "at 80 tok/s per agent",
    ]
    for acc in table.values():
        assert acc.status == (
            ADMITTED if acc.figures and all(f.within for f in acc.figures) else QUARANTINED
        )


def test_a_profile_without_records_has_no_figures(tmp_path):
    assert profile_accuracy("tiny", profiles_dir=tmp_path).figures == ()


def test_held_out_figures_are_read_at_trials_between_trials_or_never():
    sweep = [
        SweepPoint(1, 10, 500.0, 0.01, 200.0, 500.0, 600.0),
        SweepPoint(2, 20, 400.0, 0.01, 300.0, 800.0, 900.0),
        SweepPoint(64, 900, 300.0, 0.02, 9_000.0, 19_000.0, 20_000.0),
    ]
    figures = held_out_figures(
        sweep, {"single_agent": 596, "two_agents": 517, "frontier": {350.0: 5_000, 220.0: 95_000}}
    )
    assert [(f.figure, f.simulated, f.read) for f in figures] == [
        ("1 agent", 500.0, "at a trial"),
        ("2 agents", 400.0, "at a trial"),
        ("at 350 tok/s per agent", 4_650.0, "between trials"),
        ("at 220 tok/s per agent", None, "never reached by the sweep"),
    ]


def test_holdout_refuses_the_points_a_profile_was_fitted_to(capsys):
    code = main(
        [
            "holdout",
            "--profile",
            "gb300-nvl72-dsv41-flash",
            "--points",
            "gb300-nvl72-dsv41-flash-28oct",
            "--concurrency",
            "1",
        ]
    )
    assert code == 2
    assert "not held out" in capsys.readouterr().err
