"""The bootstrap's batched draws and banded percentile walk give exactly what one resample
at a time gave (docs/benchmarks.md "Rack scale in under five minutes"): the same draws,
the same percentiles, the same sums, to the last bit."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from agentperf.engine.metrics import NS, RequestRecord, attributed_tokens, share_interval
from agentperf.engine.resample import batched_counts, bootstrap_rng
from agentperf.engine.stats import (
    _resampled_percentiles,
    group_by_session,
    throughput_interval,
)


def _one_resample_at_a_time(
    per_group: list[list[float]], p: float, resamples: int, rng: np.random.Generator
) -> list[float]:
    """The walk as it was: one draw, one bincount and one full cumulative walk per resample."""
    k = len(per_group)
    pairs = sorted((v, g) for g, vs in enumerate(per_group) for v in vs)
    values = np.array([v for v, _ in pairs], dtype=np.float64)
    group_of = np.array([g for _, g in pairs], dtype=np.int64)
    size_arr = np.array([len(vs) for vs in per_group], dtype=np.int64)
    out = []
    for _ in range(resamples):
        counts = np.bincount(rng.integers(0, k, size=k), minlength=k)
        total = int(counts @ size_arr)
        if not total:
            continue
        rank = max(1, math.ceil(p / 100 * total))
        out.append(float(values[int(np.searchsorted(np.cumsum(counts[group_of]), rank))]))
    return out


@pytest.mark.parametrize("k", [1, 2, 7, 3000, 5003])
def test_batched_draws_are_those_of_one_call_per_resample(k: int) -> None:
    resamples = 1000  # k = 3000: 699 rows a batch, so a second batch is drawn
    batched = np.concatenate(list(batched_counts(bootstrap_rng(3, "x"), k, resamples)))
    rng = bootstrap_rng(3, "x")
    one_by_one = np.stack(
        [np.bincount(rng.integers(0, k, size=k), minlength=k) for _ in range(resamples)]
    )
    assert batched.shape == (resamples, k)
    assert np.array_equal(batched, one_by_one)


def _groups(rnd: random.Random, k: int, bimodal: bool) -> list[list[float]]:
    out = []
    for g in range(k):
        centre = (1000.0 if g % 2 else 10.0) if bimodal else 100.0
        size = rnd.choice([0, 1, 5, 40, 120])
        out.append(
            [
                rnd.choice([centre + rnd.gauss(0, 3), 0.0, math.inf, round(centre)])
                for _ in range(size)
            ]
        )
    return out


@pytest.mark.parametrize("p", [0.0, 1.0, 25.0, 50.0, 75.0, 99.0, 100.0])
@pytest.mark.parametrize("bimodal", [False, True])
def test_banded_percentiles_equal_the_full_walk_on_large_samples(p: float, bimodal: bool) -> None:
    # thousands of values: the band covers a fraction of them, and with two kinds of group
    # (bimodal) many resamples fall outside it and take the full walk
    rnd = random.Random(int(p) * 2 + bimodal)
    groups = _groups(rnd, 400 if bimodal else 2500, bimodal)
    assert sum(map(len, groups)) > 10_000
    expected = _one_resample_at_a_time(groups, p, 300, bootstrap_rng(1, "p"))
    assert _resampled_percentiles(groups, p, 300, bootstrap_rng(1, "p")) == expected


@pytest.mark.parametrize("p", [1.0, 25.0, 75.0, 99.0])
def test_resamples_outside_the_band_take_the_full_walk(p: float) -> None:
    # six groups of 1,500 values each in its own range: a resample that draws one group
    # twice moves its p-th value by ~1,500 places, far outside the ±512-value band
    rnd = random.Random(int(p))
    groups = [[g * 100 + rnd.random() * 50 for _ in range(1500)] for g in range(6)]
    expected = _one_resample_at_a_time(groups, p, 200, bootstrap_rng(2, "q"))
    assert len(set(expected)) > 5  # the resampled values do move far
    assert _resampled_percentiles(groups, p, 200, bootstrap_rng(2, "q")) == expected


def test_the_session_share_interval_is_the_one_summed_in_floats() -> None:
    rnd = random.Random(9)
    met = [rnd.random() < 0.8 for _ in range(4000)]
    rng = bootstrap_rng(0, "session_share:t")
    values = np.array([1.0 if m else 0.0 for m in met], dtype=np.float64)
    k = len(met)
    stats = sorted(
        float(np.bincount(rng.integers(0, k, size=k), minlength=k) @ values) / k
        for _ in range(1000)
    )
    expected = _bounds(stats)
    got = share_interval(met, resamples=1000, confidence=0.95, seed=0, name="session_share:t")
    assert got == expected


def _bounds(stats: list[float]) -> tuple[float, float]:
    alpha = (1 - 0.95) / 2  # as the intervals compute their 95 % bounds
    low = stats[max(0, math.ceil(alpha * len(stats)) - 1)]
    return low, stats[min(len(stats) - 1, math.ceil((1 - alpha) * len(stats)) - 1)]


def _records(seed: int, sessions: int) -> list[RequestRecord]:
    rnd = random.Random(seed)
    out = []
    for s in range(sessions):
        t = rnd.randrange(0, 30 * NS)
        for turn in range(rnd.randint(1, 8)):
            first = t + rnd.randrange(10**7, 10**9)
            last = first + rnd.randrange(0, 5 * NS)
            n_out = rnd.randint(1, 900)
            out.append(
                RequestRecord(
                    request_id=f"a{s % 50}s{s}t{turn}", agent_id=s % 50, session_id=f"a{s % 50}s{s}",
                    trajectory_id="x", turn_index=turn, target_output_tokens=n_out, t_send_ns=t,
                    t_first_ns=first, t_last_ns=last, t_end_ns=last, n_reads=n_out,
                    n_output_events=n_out, n_in=rnd.randint(100, 30_000), n_out=n_out,
                    n_cached=0, local_prompt_tokens=None, ok=rnd.random() > 0.02,
                )
            )  # fmt: skip
            t = last + rnd.randrange(0, 3 * NS)
    return out


def _throughput_one_resample_at_a_time(
    records: list[RequestRecord], w0: int, w1: int, accelerators: int
) -> tuple[float, float]:
    """throughput_interval's bounds as they were computed, one resample at a time."""
    scale = NS / (w1 - w0) / accelerators
    groups = group_by_session(records)
    totals = [sum(sum(attributed_tokens(r, w0, w1)) for r in g) * scale for g in groups]
    rng = bootstrap_rng(0, "throughput_per_accelerator")
    values = np.array(totals, dtype=np.float64)
    k = len(totals)
    stats = sorted(
        float(np.bincount(rng.integers(0, k, size=k), minlength=k) @ values) for _ in range(1000)
    )
    return _bounds(stats)


@pytest.mark.parametrize("sessions", [3, 400, 6000])
def test_the_throughput_interval_is_the_one_summed_one_resample_at_a_time(sessions: int) -> None:
    records = _records(sessions, sessions)
    w0, w1 = 10 * NS, 40 * NS
    got = throughput_interval(records, window_start_ns=w0, window_end_ns=w1, accelerators=72)
    assert (got.low, got.high) == _throughput_one_resample_at_a_time(records, w0, w1, 72)
    assert got.low < got.high


def test_the_throughput_interval_does_not_depend_on_the_blas_thread_count() -> None:
    """Above 10,000 elements OpenBLAS splits a dot product over its threads and adds the
    partial sums in another order; the interval is summed on one thread whatever the
    process allows (docs/engine.md "Bootstrap arithmetic"), so a 2-core and a 16-core
    machine write the same bounds."""
    from threadpoolctl import threadpool_limits

    records = _records(7, 12_000)
    w0, w1 = 10 * NS, 40 * NS
    got = {}
    for threads in (1, 2, 4):
        with threadpool_limits(limits=threads, user_api="blas"):
            iv = throughput_interval(records, window_start_ns=w0, window_end_ns=w1, accelerators=72)
        got[threads] = (iv.low, iv.high)
    assert got[1] == got[2] == got[4]
    with threadpool_limits(limits=1, user_api="blas"):
        assert got[1] == _throughput_one_resample_at_a_time(records, w0, w1, 72)


def test_the_ladders_resampled_throughput_does_not_depend_on_the_blas_thread_count() -> None:
    """The ladder's per-resample ``w @ totals`` (agentperf/ladder/attribute.py) is summed on
    one BLAS thread too (docs/engine.md "Bootstrap arithmetic")."""
    from threadpoolctl import threadpool_limits

    from agentperf.ladder.attribute import bootstrap_trial

    records = _records(7, 12_000)
    got = {}
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            _, thr, k = bootstrap_trial(
                records, 10 * NS, 40 * NS, 72, 50, seed=0, concurrency=12_000
            )
        got[threads] = thr
    assert k == 12_000 and len(got[1]) == 50
    assert got[1] == got[2]
