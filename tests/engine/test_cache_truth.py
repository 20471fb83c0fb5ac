"""Cache truth from records and the dataset (docs/metrics.md "Cache truth"): the theoretical
reusable prefix of each request, the counters' deltas over a window, and the verdicts."""

from __future__ import annotations

import dataclasses

import pytest

from agentperf.engine import cachetruth as ct
from agentperf.engine.cachetruth import PRIMED_TURN
from agentperf.engine.metrics import RequestRecord, TrialSummary, summarize
from agentperf.engine.replay import NAMESPACE_TOKENS
from agentperf.engine.trajectory import Trajectory, Turn
from agentperf.verification.speculative import parse_metrics
from tests.support.records import request_record

SYSTEM = {"role": "system", "content": "You are a coding agent."}
TOOL = {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}


def trajectory(*, tools: tuple = ()) -> Trajectory:
    """Turn 1 extends turn 0 (answer + tool output); turn 2 drops turn 1's tool output (an
    ephemeral message) and appends another."""
    return Trajectory(
        id="t",
        tools=tools,
        turns=(
            Turn(0, (SYSTEM, {"role": "user", "content": "fix it"}), 8, message_tokens=(100, 20)),
            Turn(
                2,
                (
                    {"role": "assistant", "content": "reading"},
                    {"role": "tool", "content": "file text"},
                ),
                8,
                message_tokens=(30, 200),
            ),
            Turn(3, ({"role": "user", "content": "again"},), 8, message_tokens=(50,)),
        ),
    )


def record(
    rid: str,
    turn: int,
    n_in: int,
    *,
    t: int,
    agent: int = 0,
    session: str = "a0s0",
    cached: int | None = None,
    local: int | None = None,
    extra: dict | None = None,
) -> RequestRecord:
    return request_record(
        t=t,
        request_id=rid,
        agent_id=agent,
        session_id=session,
        turn_index=turn,
        n_in=n_in,
        n_cached=cached,
        local_prompt_tokens=local,
        extra=extra or {},
    )


def no_tools(_: object) -> int:
    return 0


def test_a_turn_that_extends_its_sessions_prompt_can_reuse_what_the_server_counted_for_it():
    records = [record("r0", 0, 131, t=0), record("r1", 1, 390, t=10)]
    bounds = ct.request_bounds(records, {"t": trajectory()}, count_tools=no_tools)
    assert bounds["r0"].theoretical == 0  # the session's first request: nothing of its own
    # turn 0's whole prompt is turn 1's first two messages: the server's own count of it
    assert bounds["r1"].theoretical == 131
    assert bounds["r1"].shared_messages == 2
    assert bounds["r1"].slack == ct.SLACK_TOKENS_PER_REQUEST


def test_a_turn_that_drops_an_ephemeral_message_is_bounded_by_its_shared_messages_scaled():
    # turn 2 keeps 3 of turn 1's 4 messages: turn 1's prompt is no prefix of it, so the bound
    # is turn 2's own count scaled by the local tokens of the 3 shared messages
    local = 100 + 20 + 30 + 50 + NAMESPACE_TOKENS
    records = [
        record("r0", 0, 131, t=0),
        record("r1", 1, 390, t=10),
        record("r2", 2, 240, t=20, local=local),
    ]
    bounds = ct.request_bounds(records, {"t": trajectory()}, count_tools=no_tools)
    shared = 100 + 20 + 30 + NAMESPACE_TOKENS
    assert bounds["r2"].shared_messages == 3
    assert bounds["r2"].theoretical == pytest.approx(240 * shared / local)


def test_another_agents_identical_prompt_is_no_reusable_prefix_but_the_tools_head_is():
    records = [
        record("a", 0, 131, t=0, agent=0, session="a0s0"),
        record("b", 0, 131, t=10, agent=1, session="a1s0"),
    ]
    bounds = ct.request_bounds(records, {"t": trajectory()}, count_tools=no_tools)
    assert bounds["b"].theoretical == 0
    # a template may render the tools ahead of the namespace line: that head is reusable
    with_tools = {"t": trajectory(tools=(TOOL,))}
    local = 120 + NAMESPACE_TOKENS
    records[1].local_prompt_tokens = local
    bounds = ct.request_bounds(records, with_tools, count_tools=lambda tools: 40)
    assert bounds["b"].theoretical == pytest.approx(131 * 40 / (local + 40))


def test_a_primed_sessions_first_request_finds_the_primed_turn():
    local = 100 + 20 + 30 + 200 + NAMESPACE_TOKENS
    r1 = record("r1", 1, 390, t=0, local=local, extra={PRIMED_TURN: 0})
    bounds = ct.request_bounds([r1], {"t": trajectory()}, count_tools=no_tools)
    # no record of turn 0 to take the server's count from: the local share of turn 1's count
    assert bounds["r1"].theoretical == pytest.approx(390 * (120 + NAMESPACE_TOKENS) / local)


VLLM_START = """\
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny-vllm"} 79597.0
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{engine="0",model_name="tiny-vllm"} 1.7964072406768415e+09
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny-vllm"} 29824.0
# TYPE vllm:prefix_cache_hits_created gauge
vllm:prefix_cache_hits_created{engine="0",model_name="tiny-vllm"} 1.7964072406768658e+09
vllm:external_prefix_cache_hits_total{engine="0",model_name="tiny-vllm"} 0.0
"""


def vllm_text(queries: float, hits: float, created: str = "1.7964072406768658e+09") -> str:
    return (
        VLLM_START.replace("79597.0", str(queries))
        .replace("29824.0", str(hits))
        .replace("1.7964072406768658e+09", created)
    )


def test_vllm_counters_nonzero_at_the_window_start_are_read_as_deltas():
    # the form vLLM 0.32 serves (lines copied from a running server), two engine cores
    start = parse_metrics(VLLM_START + VLLM_START.replace('engine="0"', 'engine="1"'))
    end = parse_metrics(
        vllm_text(170339.0, 92928.0) + vllm_text(79597.0, 29824.0).replace('"0"', '"1"')
    )
    assert ct.counter_delta(start, end) == ("vllm", 92928.0 - 29824.0, 170339.0 - 79597.0)


def test_a_counter_that_goes_backwards_or_is_created_again_is_not_trusted():
    start = parse_metrics(VLLM_START)
    backwards = ct.counter_delta(start, parse_metrics(vllm_text(80000.0, 100.0)))
    assert isinstance(backwards, str) and "went backwards" in backwards
    restarted = ct.counter_delta(
        start, parse_metrics(vllm_text(90000.0, 40000.0, created="1.8e+09"))
    )
    assert isinstance(restarted, str) and "created again" in restarted
    assert ct.counter_delta(None, start) == (
        "the server's counters were not scraped at both window edges"
    )


def test_llama_cpp_counts_cached_and_processed_prompt_tokens_which_add_up_to_the_queries():
    start = parse_metrics(
        "llamacpp:prompt_tokens_total 485\nllamacpp:prompt_tokens_cached_total 458\n"
    )
    end = parse_metrics(
        "llamacpp:prompt_tokens_total 500\nllamacpp:prompt_tokens_cached_total 900\n"
    )
    assert ct.counter_delta(start, end) == ("llamacpp", 442.0, 457.0)
    no_cache = parse_metrics("llamacpp:tokens_predicted_total 24\n")
    assert ct.counter_delta(no_cache, no_cache) == "the server exports no prefix-cache counters"


def truth(*, theoretical: int, observed: int | None, prompt: int = 10_000, requests: int = 10):
    return ct.CacheTruth(
        verdict=ct.NOT_CHECKED,
        reasons=[],
        requests=requests,
        reporting=requests if observed is not None else 0,
        source="usage",
        prompt_tokens=prompt,
        theoretical_tokens=theoretical,
        observed_tokens=observed,
        slack_tokens=round(
            requests * ct.SLACK_TOKENS_PER_REQUEST + ct.SLACK_FRACTION * theoretical
        ),
        ratio=observed / theoretical if observed is not None else None,
        theoretical_share=theoretical / prompt,
        observed_share=observed / prompt if observed is not None else None,
        requests_over_bound=0,
        examples=[],
    )


def test_observed_above_theoretical_and_its_slack_fails():
    # slack: 10 requests x 64 + 2 % of 8,000 = 800 tokens
    assert ct.judge(truth(theoretical=8_000, observed=8_800)).verdict == ct.PASS
    over = ct.judge(truth(theoretical=8_000, observed=8_801))
    assert over.verdict == ct.FAIL
    assert "8,801 cached tokens > theoretical 8,000 + slack 800" in over.reasons[0]


def test_observed_far_below_theoretical_is_flagged_with_the_ratio():
    low = ct.judge(truth(theoretical=8_000, observed=3_000))
    assert low.verdict == ct.FLAGGED
    assert low.reasons == [
        "observed is 38% of theoretical (< 50%): the cache is too small, or evicted the "
        "sessions' prefixes"
    ]
    assert ct.judge(truth(theoretical=8_000, observed=4_000)).verdict == ct.PASS


def counters_text(queries: float, hits: float) -> dict[str, float]:
    return parse_metrics(vllm_text(queries, hits))


def test_requests_reporting_more_hits_than_the_counters_counted_fail_conservation():
    start = counters_text(1_000.0, 500.0)
    honest = ct.with_counters(
        truth(theoretical=8_000, observed=7_000), start, counters_text(21_000.0, 14_200.0)
    )
    assert honest.verdict == ct.PASS
    assert honest.counters is not None and honest.counters.status == ct.AGREES
    assert honest.counters.hit_share == pytest.approx(13_700 / 20_000)
    inflated = ct.with_counters(
        truth(theoretical=8_000, observed=7_000), start, counters_text(21_000.0, 12_500.0)
    )
    assert inflated.counters is not None and inflated.counters.status == ct.DISAGREES
    assert inflated.counters.difference == pytest.approx(0.70 - 0.60)
    assert inflated.verdict == ct.FAIL
    assert "more cached tokens reported than the cache counted" in inflated.reasons[-1]


def test_counters_above_the_requests_reports_are_flagged_and_above_the_bound_fail():
    start = counters_text(0.0, 0.0)
    above = ct.with_counters(
        truth(theoretical=8_000, observed=6_000), start, counters_text(10_000.0, 7_000.0)
    )
    assert above.verdict == ct.FLAGGED
    beyond = ct.with_counters(
        truth(theoretical=5_000, observed=5_000), start, counters_text(10_000.0, 9_000.0)
    )
    assert beyond.verdict == ct.FAIL
    assert any("more hits than the sessions' own prefixes allow" in r for r in beyond.reasons)


def test_a_server_that_reports_nothing_is_not_checked_and_says_why():
    judged = ct.judge(truth(theoretical=8_000, observed=None))
    assert judged.verdict == ct.NOT_CHECKED
    assert judged.reasons[0].startswith("not checked: the server reported no cached tokens")
    assert ct.worst_verdict([ct.NOT_CHECKED, ct.PASS, ct.FLAGGED]) == ct.FLAGGED
    assert ct.worst_verdict([ct.NOT_CHECKED]) == ct.NOT_CHECKED


def test_llama_cpp_timings_are_the_observed_count_when_usage_has_none():
    r = record("r", 0, 100, t=0, extra={"server_timings": {"cache_n": 37, "prompt_n": 63}})
    assert ct.observed_cached(r) == (37, ct.SOURCE_TIMINGS)
    r.n_cached = 36
    assert ct.observed_cached(r) == (36, ct.SOURCE_USAGE)


def test_a_window_sums_its_requests_and_a_trial_summary_carries_it_through_json():
    records = [
        record("r0", 0, 131, t=0, cached=0),
        record("r1", 1, 390, t=10, cached=128),
        record("late", 2, 240, t=99, cached=200),  # sent after the window
    ]
    got = ct.summarize_cache_truth(
        records, [trajectory()], window_start_ns=0, window_end_ns=50, count_tools=no_tools
    )
    assert (got.requests, got.prompt_tokens) == (2, 521)
    assert (got.theoretical_tokens, got.observed_tokens) == (131, 128)
    assert got.ratio == pytest.approx(128 / 131)
    assert got.verdict == ct.PASS and got.counters is None
    summary = summarize(records, window_start_ns=0, window_end_ns=50, accelerators=1)
    summary.cache_truth = got
    assert TrialSummary.from_dict(summary.to_dict()).cache_truth == got


def test_a_request_in_flight_at_an_edge_widens_the_conservation_tolerance_by_its_share():
    """The llama.cpp e2e's flake: on a slow CPU a window holds three requests, and the last,
    sent just before W1 and answered after it, is in the window's requests but not in the
    counters scraped at W1. Its prompt tokens are the window's edge share."""
    w0, w1 = 1_000, 2_000

    def timed(rid: str, turn: int, n_in: int, cached: int, send: int, first: int):
        r = record(rid, turn, n_in, t=send, cached=cached)
        return dataclasses.replace(r, t_first_ns=first, t_last_ns=first + 4, t_end_ns=first + 5)

    records = [
        timed("r0", 0, 131, 0, send=w0 + 10, first=w0 + 400),  # cold turn, inside
        timed("r1", 1, 390, 131, send=w0 + 500, first=w0 + 800),  # inside
        timed("r2", 2, 450, 380, send=w1 - 50, first=w1 + 300),  # in flight at W1
    ]
    assert ct.edge_tokens(records, w0, w1) == 450
    summary = ct.summarize_cache_truth(
        records,
        {"t": trajectory()},
        window_start_ns=w0,
        window_end_ns=w1,
        count_tools=no_tools,
    )
    assert summary.edge_tokens == 450 and summary.prompt_tokens == 971
    # the counters saw r0 and r1 only: 131 of 521 prompt tokens, 25 % against the
    # requests' 511 / 971 = 53 %
    start = counters_text(0.0, 0.0)
    judged = ct.with_counters(summary, start, counters_text(521.0, 131.0))
    assert judged.counters is not None and judged.counters.status == ct.AGREES
    assert judged.counters.tolerance == pytest.approx(0.05 + 450 / 971)
    assert judged.verdict != ct.FAIL
    # without the edge, the same shares are a conservation failure
    still = ct.with_counters(
        summary.model_copy(update={"edge_tokens": 0}), start, counters_text(521.0, 131.0)
    )
    assert still.verdict == ct.FAIL
