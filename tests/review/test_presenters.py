"""Shaping stored run data for the run page: trial rows, tier outcomes, chart, evidence."""

from agentperf import contract
from agentperf.engine.search import SearchResult, SearchTrial, TierResult
from agentperf.engine.trial import TierVerdict
from review.presenters import (
    check_counts,
    evidence_rows,
    tier_outcomes,
    trial_chart,
    trial_rows,
)
from runs.models import CheckResult, Trial
from tests.review.builders import summary_dict

TIERS = [
    {
        "name": "20 tok/s",
        "min_p25_output_speed": 20,
        "max_ttft_s": 10,
        "ttft_percentile": 75,
        "max_error_rate": 0.01,
    },
    {
        "name": "100 tok/s",
        "min_p25_output_speed": 100,
        "max_ttft_s": 5,
        "ttft_percentile": 75,
        "max_error_rate": 0.01,
    },
]


def _verdict(passed: bool, *reasons: str) -> dict:
    """The engine's verdict as the worker stores it (agentperf/contract.py TierVerdict)."""
    return contract.TierVerdict.of(TierVerdict(passed=passed, reasons=list(reasons))).dump()


def _trial(index, n, phase, p25, ttft, verdicts) -> Trial:
    """A trial row as the worker's upload stores it (not saved: the presenters read it)."""
    return Trial(
        index=index,
        concurrency=n,
        phase=phase,
        metrics=summary_dict(concurrency=n, p25=p25, ttft_p75=ttft),
        verdicts=verdicts,
    )


def test_trial_rows_follow_run_order_with_a_verdict_per_tier_and_reasons():
    trials = [
        _trial(
            1,
            4,
            "ramp",
            80.0,
            2.0,
            {"20 tok/s": _verdict(True), "100 tok/s": _verdict(False, "p25 80 < 100")},
        ),
        _trial(0, 1, "ramp", 150.0, 0.5, {"20 tok/s": _verdict(True), "100 tok/s": _verdict(True)}),
    ]
    rows = trial_rows(trials, ["20 tok/s", "100 tok/s"])
    assert [(r.index, r.concurrency) for r in rows] == [(0, 1), (1, 4)]
    assert rows[1].verdicts == [("20 tok/s", True, []), ("100 tok/s", False, ["p25 80 < 100"])]
    assert rows[0].verdicts == [("20 tok/s", True, []), ("100 tok/s", True, [])]
    assert rows[1].p25_speed == 80.0 and rows[1].ttft["p75"] == 2.0
    assert rows[1].client_healthy is True and rows[1].error_percent == 0.0


def test_an_infinite_ttft_stored_as_null_stays_none_and_a_missing_verdict_is_unknown():
    rows = trial_rows([_trial(0, 64, "ramp", 3.0, None, {})], ["20 tok/s"])
    assert rows[0].ttft["p75"] is None
    assert rows[0].verdicts == [("20 tok/s", None, [])]


def test_tier_outcomes_join_thresholds_with_the_search_result():
    trial = SearchTrial(0, 24, "ramp", {"20 tok/s": True})
    tier = TierResult(
        name="20 tok/s", max_agents=24, lowest_fail=None, confirmed=True, converged=True, flags=[]
    )
    result = SearchResult([trial], {"20 tok/s": tier}, cap=64, flags=[])
    out = tier_outcomes(contract.SearchSummary.of(result), TIERS)
    assert out[0]["max_agents"] == 24 and out[0]["confirmed"] is True
    assert out[0]["max_error_percent"] == 1.0
    assert out[1]["max_agents"] is None and out[1]["flags"] == []


def test_the_chart_plots_speed_and_ttft_by_phase_with_a_dotted_line_per_tier():
    trials = [
        _trial(0, 1, "ramp", 150.0, 0.5, {}),
        _trial(1, 2, "ramp", 120.0, 1.0, {}),
        _trial(2, 2, "confirm", 118.0, 1.1, {}),
    ]
    fig = trial_chart(trial_rows(trials, []), TIERS)
    speed = [t for t in fig["data"] if t.get("name") == "ramp"]
    assert speed[0]["x"] == [1, 2] and speed[0]["y"] == [150.0, 120.0]
    ttft = [t for t in fig["data"] if t.get("name") == "confirm TTFT p75"]
    assert ttft[0]["yaxis"] == "y2" and ttft[0]["y"] == [1.1]
    lines = [s for s in fig["layout"]["shapes"] if s["line"]["dash"] == "dot"]
    assert sorted((s["yref"], s["y0"]) for s in lines) == [
        ("y", 20),
        ("y", 100),
        ("y2", 5),
        ("y2", 10),
    ]
    assert fig["layout"]["xaxis2"]["type"] == "log"


def test_evidence_is_flattened_to_dotted_keys_with_structures_as_json_blocks():
    rows = evidence_rows(
        {
            "requests": 10,
            "ok": True,
            "ratio": 0.123456789,
            "nested": {"a": {"b": None}},
            "ids": [1, 2, 3],
            "samples": [{"agent": 1}],
            "empty": {},
        }
    )
    by_key = {r["key"]: r for r in rows}
    assert by_key["requests"]["value"] == "10"
    assert by_key["ok"]["value"] == "yes"
    assert by_key["ratio"]["value"] == "0.123457"
    assert by_key["nested.a.b"]["value"] == "—"
    assert by_key["ids"]["value"] == "1, 2, 3" and not by_key["ids"]["block"]
    assert by_key["samples"]["block"] and '"agent": 1' in by_key["samples"]["value"]
    assert by_key["empty"]["value"] == "{}"


def test_check_counts_count_each_status():
    checks = [
        CheckResult(name=f"c{i}", status=status)
        for i, status in enumerate(("pass", "fail", "pass", "odd"))
    ]
    assert check_counts(checks) == {"pass": 2, "warn": 0, "fail": 1}
