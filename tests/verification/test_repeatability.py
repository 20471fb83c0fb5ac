"""Repeatability: repeated trials at one N must agree, unless their disagreement is within
the sampling noise that their session-bootstrap intervals show."""

from agentperf.verification.checks import TrialData
from agentperf.verification.measurement import check_repeatability


def trial(index: int, n: int, speed: float, low: float, high: float, ttft: float = 0.05):
    metrics = {
        "p25_output_speed": speed,
        "ttft_s": {"p75": ttft},
        "statistics": {
            "intervals": {
                "p25_output_speed": {"low": low, "high": high},
                "ttft_p75": {"low": ttft * 0.9, "high": ttft * 1.1},
            }
        },
    }
    return TrialData(index=index, concurrency=n, phase="ramp", metrics=metrics)


def test_repeats_within_the_tolerance_pass():
    check = check_repeatability([trial(0, 2, 100, 95, 105), trial(1, 2, 104, 99, 109)])
    assert check["status"] == "pass"


def test_a_disagreement_beyond_twice_the_tolerance_with_disjoint_intervals_fails():
    check = check_repeatability([trial(0, 2, 160, 150, 170), trial(1, 2, 120, 110, 130)])
    assert check["status"] == "fail"
    assert check["evidence"]["groups"][0]["sampling_noise"] == []


def test_the_same_disagreement_within_overlapping_intervals_only_warns():
    # few requests per trial: wide intervals that overlap, so the spread is sampling noise
    check = check_repeatability([trial(0, 2, 160, 126, 223), trial(1, 2, 120, 95, 165)])
    assert check["status"] == "warn"
    assert check["evidence"]["groups"][0]["sampling_noise"] == ["p25 speed"]
    assert "within sampling noise" in check["summary"]


def test_trials_without_intervals_are_judged_on_the_spread_alone():
    a, b = trial(0, 2, 160, 126, 223), trial(1, 2, 120, 95, 165)
    del b.metrics["statistics"]
    assert check_repeatability([a, b])["status"] == "fail"


def test_no_repeated_concurrency_warns_that_nothing_confirms():
    check = check_repeatability([trial(0, 1, 100, 90, 110), trial(1, 2, 90, 80, 100)])
    assert check["status"] == "warn"


def test_on_a_shared_host_a_disagreement_is_reported_but_does_not_fail():
    trials = [trial(0, 2, 160, 150, 170), trial(1, 2, 120, 110, 130)]  # disjoint: a fail
    check = check_repeatability(trials, shared_host=True)
    assert check["status"] == "warn"
    assert "the host is shared with other work: reported, not failed" in check["summary"]
    group = check["evidence"]["groups"][0]
    assert group["speed_spread"] > 0.2 and group["shared_host_warning"]  # still shown
    assert group["sampling_noise"] == []  # not noise: the intervals are disjoint
    assert check_repeatability(trials)["status"] == "fail"
