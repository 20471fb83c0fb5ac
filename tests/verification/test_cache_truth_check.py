"""The cache_truth check on trials as the web side stores them (docs/verification.md
"cache_truth", docs/metrics.md "Cache truth"): raw records and the dataset when loaded,
else the runner's stored figure, judged with the window's counter scrapes."""

from __future__ import annotations

from agentperf.engine import cachetruth as ct
from agentperf.engine.metrics import RequestRecord
from agentperf.engine.trajectory import Trajectory, Turn
from agentperf.verification.cache import check_cache_truth
from agentperf.verification.checks import TrialData
from tests.support.records import request_record

TRAJECTORY = Trajectory(
    id="t",
    turns=(
        Turn(0, ({"role": "system", "content": "agent"}, {"role": "user", "content": "go"}), 8),
        Turn(2, ({"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}), 8),
        Turn(4, ({"role": "assistant", "content": "ok"}, {"role": "user", "content": "end"}), 8),
    ),
)


def record(turn: int, n_in: int, cached: int | None, *, t: int) -> RequestRecord:
    return request_record(t=t, request_id=f"r{turn}", turn_index=turn, n_in=n_in, n_cached=cached)


def counters(queries: float, hits: float) -> dict[str, float]:
    return {"vllm:prefix_cache_queries": queries, "vllm:prefix_cache_hits": hits}


def trial(
    cached: tuple[int | None, ...] = (0, 896, 1920),
    scrape: dict | None = None,
    *,
    records: bool = True,
    metrics: dict | None = None,
) -> TrialData:
    rs = [
        record(k, n_in, c, t=10 * k)
        for k, (n_in, c) in enumerate(zip((1000, 2000, 3000), cached, strict=True))
    ]
    return TrialData(
        index=0,
        concurrency=1,
        metrics={"window_start_ns": 0, "window_end_ns": 100, **(metrics or {})},
        telemetry={"server_metrics": scrape} if scrape is not None else {},
        records=rs if records else None,
    )


def test_a_trial_is_judged_from_its_records_and_the_dataset_with_its_counters():
    scrape = {"start": counters(50_000, 20_000), "end": counters(56_000, 22_816)}
    check = check_cache_truth({"t": TRAJECTORY}, [trial(scrape=scrape)])
    assert check["status"] == "pass", check
    row = check["evidence"]["trials"][0]
    # turn 1 can reuse turn 0's 1,000 tokens, turn 2 turn 1's 2,000
    assert (row["theoretical_tokens"], row["observed_tokens"]) == (3000, 2816)
    assert row["counters"]["status"] == "agrees"
    assert row["counters"]["hit_share"] == 2816 / 6000
    assert check["summary"] == (
        "observed 2,816 of theoretical 3,000 cached tokens (94%) over 1 trials; "
        "counters agree in 1 of 1"
    )


def test_a_counter_that_reset_is_not_checked_and_the_bound_still_judges():
    scrape = {"start": counters(50_000, 20_000), "end": counters(6_000, 2_816)}
    check = check_cache_truth({"t": TRAJECTORY}, [trial(scrape=scrape)])
    counters_row = check["evidence"]["trials"][0]["counters"]
    assert counters_row["status"] == "not_checked"
    assert "went backwards" in counters_row["reason"]
    assert check["status"] == "pass"
    assert check["summary"].endswith("; counters not checked")


def test_more_cached_than_the_sessions_own_prefixes_fails_naming_the_trial():
    check = check_cache_truth({"t": TRAJECTORY}, [trial(cached=(999, 1999, 2999))])
    assert check["status"] == "fail"
    assert check["summary"].startswith("1 of 1 trials fail: trial 0 (N=1): observed 5,997")
    assert check["evidence"]["trials"][0]["requests_over_bound"] == 3  # each its whole prompt


def test_without_raw_records_the_runners_stored_figure_is_judged_with_the_counters():
    stored = ct.summarize_cache_truth(
        trial().records or [], [TRAJECTORY], window_start_ns=0, window_end_ns=100
    ).to_dict()
    # the requests' reports say 2,816 of 6,000 prompt tokens; the counters only 1,000
    scrape = {"start": counters(0, 0), "end": counters(6_000, 1_000)}
    check = check_cache_truth(
        None, [trial(scrape=scrape, records=False, metrics={"cache_truth": stored})]
    )
    assert check["status"] == "fail"
    assert "more cached tokens reported than the cache counted" in check["summary"]


def test_a_server_that_reports_no_cached_tokens_is_a_warning_never_a_pass():
    check = check_cache_truth({"t": TRAJECTORY}, [trial(cached=(None, None, None))])
    assert check["status"] == "warn"
    assert check["summary"].startswith("not measured: not checked: the server reported no")
    assert check_cache_truth(None, [trial(records=False)])["status"] == "warn"
