"""The statistics and window accounting of docs/engine.md "Definitions", with hypothesis
properties."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agentperf.engine.metrics import (
    NS,
    RequestRecord,
    TrialSummary,
    attributed_tokens,
    judge_client_health,
    percentile,
    summarize,
)


def rec(
    t_send: int,
    ttft: int = 100,
    dur: int = 1000,
    n_out: int = 11,
    n_in: int = 100,
    cached: int | None = 0,
    ok: bool = True,
    **kw: Any,
) -> RequestRecord:
    t_first = t_send + ttft
    return RequestRecord(
        request_id=kw.get("rid", f"r{t_send}"),
        agent_id=0,
        session_id="s",
        trajectory_id="t",
        turn_index=0,
        target_output_tokens=n_out,
        t_send_ns=t_send,
        t_first_ns=t_first if ok else None,
        t_last_ns=t_first + dur if ok else None,
        t_end_ns=t_first + dur,
        n_reads=n_out,
        n_output_events=n_out,
        n_in=n_in,
        n_out=n_out,
        n_cached=cached,
        local_prompt_tokens=None,
        ok=ok,
        error_class=None if ok else kw.get("error_class", "timeout"),
        error_detail=kw.get("detail", ""),
    )


def test_output_speed_excludes_the_first_token() -> None:
    r = rec(0, ttft=5 * NS, dur=2 * NS, n_out=101)
    assert r.output_speed == pytest.approx(50.0)
    assert r.ttft_s == pytest.approx(5.0)


def test_output_speed_is_undefined_for_one_token_or_one_read() -> None:
    assert rec(0, n_out=1).output_speed is None
    assert rec(0, dur=0).output_speed is None


def test_failed_request_counts_as_speed_zero_and_infinite_ttft() -> None:
    r = rec(0, ok=False)
    assert r.output_speed == 0.0
    assert math.isinf(r.ttft_s)


def test_nearest_rank_percentile_on_a_known_list() -> None:
    values = [float(v) for v in range(1, 11)]
    assert percentile(values, 25) == 3.0
    assert percentile(values, 50) == 5.0
    assert percentile(values, 75) == 8.0
    assert percentile(values, 99) == 10.0
    assert percentile(values, 0) == 1.0


@given(
    st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=200),
    st.integers(1, 99),
)
def test_percentile_bounds_hold_exactly(values: list[float], p: int) -> None:
    x = percentile(values, p)
    assert x in values
    n = len(values)
    assert sum(v <= x for v in values) >= p / 100 * n
    assert sum(v >= x for v in values) >= (100 - p) / 100 * n


@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=100))
def test_p25_speed_means_three_quarters_were_at_least_that_fast(speeds: list[float]) -> None:
    x = percentile(speeds, 25)
    assert sum(s >= x for s in speeds) >= 0.75 * len(speeds)


@given(
    st.lists(st.floats(0.001, 100, allow_nan=False), min_size=1, max_size=50),
    st.integers(0, 50),
    st.sampled_from([50, 75, 90, 95, 99]),
)
def test_failures_only_make_ttft_percentiles_worse(
    ttfts: list[float], failures: int, p: int
) -> None:
    base = percentile(ttfts, p)
    worse = percentile(ttfts + [math.inf] * failures, p)
    assert worse >= base


def test_statistics_use_only_requests_sent_inside_the_window() -> None:
    w0, w1 = 10 * NS, 20 * NS
    inside = [rec(w0 + i * NS, ttft=NS) for i in range(4)]
    before = rec(w0 - 1, ttft=100 * NS)  # slow, but sent during warm-up
    after = rec(w1, ok=False)  # sent at the window end: excluded
    s = summarize([before, *inside, after], window_start_ns=w0, window_end_ns=w1, accelerators=1)
    assert s.requests == 4
    assert s.error_rate == 0.0
    assert s.ttft_s["p99"] == pytest.approx(1.0)
    assert s.requests_total == 6


def test_error_rate_and_error_classes_count_failed_requests() -> None:
    w0, w1 = 0, 100 * NS
    rs = [rec(i * NS) for i in range(9)] + [rec(50 * NS, ok=False, error_class="http_status")]
    s = summarize(rs, window_start_ns=w0, window_end_ns=w1, accelerators=1)
    assert s.error_rate == pytest.approx(0.1)
    assert s.errors_by_class == {"http_status": 1}
    assert math.isinf(s.ttft_s["p99"])
    assert s.ttft_s["p50"] == pytest.approx(100 / NS)


def too_long(prompt: int) -> str:
    return (
        "HTTP 400: This model's maximum context length is 16384 tokens. However, your prompt "
        f"contains at least {prompt} input tokens, which exceeds this limit even without any "
        f"output tokens. (parameter=input_tokens, value={prompt})"
    )


def test_error_reasons_group_details_that_differ_only_in_their_numbers() -> None:
    w0, w1 = 0, 100 * NS
    failed = [
        rec(i * NS, ok=False, error_class="http_status", detail=too_long(16385 + i))
        for i in range(7)
    ]
    failed += [
        rec(20 * NS, ok=False, error_class="timeout", detail="no complete response within 600 s"),
        rec(
            21 * NS,
            ok=False,
            error_class="http_status",
            detail="HTTP 500: engine dead (req a3s1t0r2)",
        ),
        rec(
            22 * NS,
            ok=False,
            error_class="http_status",
            detail="HTTP 503: engine dead (req a0s0t4r1)",
        ),
        rec(
            23 * NS,
            ok=False,
            error_class="http_status",
            detail="HTTP 500: engine dead (req a1s7t1r9)",
        ),
        rec(200 * NS, ok=False, error_class="timeout", detail="outside the window"),
    ]
    s = summarize([rec(30 * NS), *failed], window_start_ns=w0, window_end_ns=w1, accelerators=1)
    assert [(r.error_class, r.reason, r.count) for r in s.error_reasons] == [
        (
            "http_status",
            "HTTP 400: This model's maximum context length is N tokens. However, your prompt "
            "contains at least N input tokens, which exceeds this limit even without any "
            "output tokens. (parameter=input_tokens, value=N)",
            7,
        ),
        ("http_status", "HTTP 500: engine dead (req N)", 2),  # a 503 is another reason
        ("timeout", "no complete response within N s", 1),
        ("http_status", "HTTP 503: engine dead (req N)", 1),
    ]
    assert s.error_reasons[0].example == too_long(16385)  # the first, as it came
    assert sum(r.count for r in s.error_reasons) == s.failed


def test_error_reasons_keep_the_five_most_frequent() -> None:
    rs = [
        rec(i * NS, ok=False, error_class="protocol", detail=f"error event: kind {kind}")
        for i, kind in enumerate("aabbbcdefgggg")
    ]
    s = summarize(rs, window_start_ns=0, window_end_ns=100 * NS, accelerators=1)
    assert [(r.reason, r.count) for r in s.error_reasons] == [
        ("error event: kind g", 4),
        ("error event: kind b", 3),
        ("error event: kind a", 2),
        ("error event: kind c", 1),
        ("error event: kind d", 1),
    ]
    back = TrialSummary.from_dict(s.to_dict())
    assert back.error_reasons == s.error_reasons


def test_cache_hit_ratio_is_cached_over_prompt_tokens() -> None:
    rs = [rec(0, n_in=100, cached=0), rec(1, n_in=300, cached=300)]
    s = summarize(rs, window_start_ns=0, window_end_ns=NS, accelerators=1)
    assert s.cache_hit_ratio == pytest.approx(0.75)


def test_throughput_per_accelerator_attributes_tokens_by_time() -> None:
    # input 1000 at t_first=1 s, 101 output tokens over [1 s, 3 s]; window [2 s, 4 s)
    r = rec(0, ttft=NS, dur=2 * NS, n_out=101, n_in=1000)
    s = summarize([r], window_start_ns=2 * NS, window_end_ns=4 * NS, accelerators=4)
    assert s.input_tokens == 0
    assert s.output_tokens == pytest.approx(50.5)
    assert s.throughput_per_accelerator == pytest.approx(50.5 / 2 / 4)


def test_mean_in_flight_is_the_time_average_of_open_requests() -> None:
    rs = [rec(0, ttft=0, dur=10 * NS), rec(0, ttft=0, dur=5 * NS)]
    s = summarize(rs, window_start_ns=0, window_end_ns=10 * NS, accelerators=1)
    assert s.mean_in_flight == pytest.approx(1.5)


@st.composite
def records(draw: st.DrawFn) -> list[RequestRecord]:
    n = draw(st.integers(1, 30))
    out = []
    for i in range(n):
        out.append(
            rec(
                draw(st.integers(0, 100 * NS)),
                ttft=draw(st.integers(0, 10 * NS)),
                dur=draw(st.integers(0, 20 * NS)),
                n_out=draw(st.integers(1, 2000)),
                n_in=draw(st.integers(1, 100_000)),
                ok=draw(st.booleans()),
                rid=f"r{i}",
            )
        )
    return out


@settings(max_examples=100)
@given(records(), st.lists(st.integers(0, 140 * NS), min_size=1, max_size=6, unique=True))
def test_window_accounting_is_additive_over_adjacent_windows(
    rs: list[RequestRecord], cuts: list[int]
) -> None:
    bounds = sorted(set(cuts) | {-1, 200 * NS})
    total_in = total_out = 0.0
    for a, b in zip(bounds, bounds[1:], strict=False):
        for r in rs:
            i, o = attributed_tokens(r, a, b)
            total_in += i
            total_out += o
    ok = [r for r in rs if r.ok]
    assert total_in == pytest.approx(sum(r.n_in or 0 for r in ok))
    assert total_out == pytest.approx(sum(r.n_out or 0 for r in ok))


@given(records(), st.integers(0, 100 * NS), st.integers(1, 100 * NS), st.integers(1, 8))
def test_tokens_counted_in_a_window_never_exceed_the_tokens_produced(
    rs: list[RequestRecord], w0: int, length: int, accelerators: int
) -> None:
    s = summarize(rs, window_start_ns=w0, window_end_ns=w0 + length, accelerators=accelerators)
    ok = [r for r in rs if r.ok]
    assert 0 <= s.input_tokens <= sum(r.n_in or 0 for r in ok) + 1e-6
    assert 0 <= s.output_tokens <= sum(r.n_out or 0 for r in ok) + 1e-6
    assert s.throughput_per_accelerator * accelerators * s.window_s == pytest.approx(
        s.input_tokens + s.output_tokens
    )
    assert 0 <= s.mean_in_flight <= len(rs)
    assert s.requests == sum(w0 <= r.t_send_ns < w0 + length for r in rs)
    assume(s.requests > 0)
    assert s.ok + s.failed == s.requests


def test_summary_round_trips_through_json_with_infinite_ttft() -> None:
    s = summarize([rec(0, ok=False)], window_start_ns=0, window_end_ns=NS, accelerators=1)
    d = s.to_dict()
    assert d["ttft_s"]["p50"] is None
    back = TrialSummary.from_dict(d)
    assert math.isinf(back.ttft_s["p50"])
    assert back.requests == 1


def test_an_overloaded_client_is_judged_unhealthy() -> None:
    assert judge_client_health(3.0, 40.0).healthy
    bad = judge_client_health(80.0, 40.0)
    assert not bad.healthy and "lag" in bad.reason
    assert not judge_client_health(1.0, 99.0).healthy
    assert judge_client_health(None, None).healthy  # virtual time: not measured
