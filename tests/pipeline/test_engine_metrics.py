"""The engine-metrics sampler (runner/telemetry/engine_metrics.py): Prometheus text in vLLM's
and llama.cpp's names to series, a trial window cut with the scrape before it, failed scrapes
counted, and the result page's per-trial figures from them (leaderboard/engine_metrics.py).
The real server's /metrics through a whole run is tests/pipeline/test_e2e_vllm.py."""

from __future__ import annotations

import time
from types import SimpleNamespace

from agentperf import contract
from leaderboard.engine_metrics import engine_metrics_figure, engine_metrics_rows
from runner.telemetry.engine_metrics import MAX_POINTS, EngineMetricsSampler, parse_engine_metrics

VLLM_TEXT = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} {running}
vllm:num_requests_running{{engine="1",model_name="m"}} 1.0
vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}
vllm:num_requests_waiting_by_reason{{engine="0",model_name="m",reason="capacity"}} 99.0
vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}
vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}
vllm:prefix_cache_queries_created{{engine="0",model_name="m"}} 1.7e+09
vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}
vllm:num_preemptions_total{{engine="0",model_name="m"}} 2.0
"""


def vllm_text(running=2.0, waiting=0.0, kv=0.25, queries=1000.0, hits=500.0) -> str:
    return VLLM_TEXT.format(running=running, waiting=waiting, kv=kv, queries=queries, hits=hits)


def test_vllm_series_are_summed_over_engines_and_other_names_are_ignored() -> None:
    values = parse_engine_metrics(vllm_text(running=3.0, waiting=4.0))
    assert values == {
        "running": 4.0,  # two data-parallel engines
        "waiting": 4.0,  # not the by-reason series
        "kv_cache_usage": 0.25,
        "prefix_cache_queries": 1000.0,
        "prefix_cache_hits": 500.0,
        "preemptions": 2.0,
    }


def test_llama_cpp_names_map_to_the_same_series() -> None:
    text = "llamacpp:requests_processing 2\nllamacpp:requests_deferred 1\nllamacpp:tokens 5\n"
    assert parse_engine_metrics(text) == {"running": 2.0, "waiting": 1.0}


def test_a_window_keeps_the_scrape_before_it_and_counts_failed_scrapes() -> None:
    answers = iter([vllm_text(queries=1000, hits=500), "boom", vllm_text(queries=3000, hits=2000)])

    def scrape() -> str:
        answer = next(answers)
        if answer == "boom":
            raise ConnectionError("refused")
        return answer

    sampler = EngineMetricsSampler(scrape, interval_s=1.0)
    sampler.read_once()
    w0 = time.perf_counter_ns()
    sampler.read_once()
    sampler.read_once()
    w1 = time.perf_counter_ns()
    window = sampler.window(w0, w1)
    assert window is not None
    assert window["failed_scrapes"] == 1 and sampler.last_error == "ConnectionError: refused"
    hits = window["series"]["prefix_cache_hits"]
    assert [v for _, v in hits] == [500.0, 2000.0]
    assert hits[0][0] < 0 <= hits[1][0]  # the first scrape is from before the window
    assert window["counters"] == ["preemptions", "prefix_cache_hits", "prefix_cache_queries"]
    # what the worker posts fits the contract (docs/pipeline.md "The contract")
    telemetry = contract.TrialTelemetry.model_validate(
        {"measured": False, "reason": "no GPU", "engine_metrics": window}
    )
    trial = SimpleNamespace(index=2, concurrency=4, window_telemetry=telemetry)
    (row,) = engine_metrics_rows([trial])
    assert row["cache_hits"] == 1500.0 and row["cache_queries"] == 2000.0
    assert row["hit_rate"] == 0.75 and row["preemptions"] == 0.0
    assert row["running_peak"] == 3.0  # the scrape before the window is not a peak of it
    figure = engine_metrics_figure([trial])
    assert figure is not None
    names = [t["name"] for t in figure["data"]]
    assert names == [
        "running requests",
        "waiting requests",
        "KV-cache usage",
        "prefix-cache hit rate (between scrapes)",
    ]
    assert figure["data"][-1]["y"] == [0.75]


def test_no_answering_scrape_gives_no_window() -> None:
    sampler = EngineMetricsSampler(lambda: "", interval_s=1.0)
    sampler.read_once()
    assert sampler.window(0, time.perf_counter_ns()) is None


def test_kv_cache_usage_is_averaged_over_engines_and_non_finite_values_are_dropped() -> None:
    text = (
        'vllm:kv_cache_usage_perc{engine="0"} 0.5\n'
        'vllm:kv_cache_usage_perc{engine="1"} 0.75\n'
        'vllm:num_requests_running{engine="0"} NaN\n'
        'vllm:num_requests_waiting{engine="0"} +Inf\n'
    )
    # two equal caches half and three-quarters full: 62.5 % of the whole, never 125 %
    assert parse_engine_metrics(text) == {"kv_cache_usage": 0.625}


def test_a_thinned_window_keeps_its_last_scrape_and_stays_within_its_points() -> None:
    count = 2 * MAX_POINTS + 7
    answers = iter(range(count))
    sampler = EngineMetricsSampler(lambda: vllm_text(hits=float(next(answers))), interval_s=1.0)
    w0 = time.perf_counter_ns()
    for _ in range(count):
        sampler.read_once()
    window = sampler.window(w0, time.perf_counter_ns())
    assert window is not None
    hits = [v for _, v in window["series"]["prefix_cache_hits"]]
    assert len(hits) <= MAX_POINTS
    assert hits[0] == 0.0 and hits[-1] == float(count - 1)  # a counter's end is never dropped
