"""Cache truth of whole trials against the simulator on virtual time (docs/metrics.md "Cache
truth"): an honest deployment's cached tokens stay under the sessions' own prefixes and agree
with its counters; the dishonest modes that report more hits than possible fail."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from agentperf.engine import cachetruth as ct
from agentperf.engine.datasets.synthetic import generate_dataset
from agentperf.engine.replay import ReplayConfig
from agentperf.engine.trajectory import Trajectory
from agentperf.engine.trial import TrialConfig, TrialResult, run_trial, write_trial
from agentperf.simulator.virtual import run_with_simulator
from agentperf.verification.speculative import parse_metrics
from catalog.datasets import small_shape
from tests.support import dishonest


@functools.cache
def trajectories() -> tuple[Trajectory, ...]:
    return generate_dataset(seed=7, trajectories=6, params=small_shape(), name="ct").trajectories


def trial(
    cheat: str | None, *, concurrency: int = 6, prime_cache: bool = False
) -> tuple[TrialResult, ct.CacheTruth]:
    """One trial on the tiny profile, the server's counters read at the window's edges as
    the pool worker reads them (runner/worker/director.py on_window)."""
    config = TrialConfig(
        concurrency=concurrency,
        warmup_s=10,
        duration_s=40,
        accelerators=1,
        bootstrap_resamples=0,
        replay=ReplayConfig(
            model="tiny-1b", seed=3, ramp_s=10, tool_delay_scale=0.5, prime_cache=prime_cache
        ),
    )
    marks: dict[str, dict[str, float]] = {}

    async def main(transport: Any, clock: Any) -> TrialResult:
        def on_window(mark: str, _: int) -> None:
            marks[mark] = parse_metrics(transport.metrics_text())

        return await run_trial(transport, clock, trajectories(), config, on_window=on_window)

    behaviour = dishonest.parse(cheat) if cheat else None
    result = run_with_simulator("tiny", main, seed=0, behaviour=behaviour)
    assert result.summary.cache_truth is not None
    return result, ct.with_counters(result.summary.cache_truth, marks["start"], marks["end"])


@pytest.mark.parametrize("prime_cache", [False, True])
def test_an_honest_deployment_caches_a_little_under_the_theoretical_and_agrees_with_its_counters(
    prime_cache: bool,
) -> None:
    result, truth = trial(None, prime_cache=prime_cache)
    assert truth.verdict == ct.PASS, truth.reasons
    assert truth.requests == result.summary.ok > 100
    assert truth.observed_tokens is not None and truth.observed_tokens > 0
    # whole 16-token blocks only, and never the prompt's last token: a little under
    assert truth.ratio is not None and 0.95 <= truth.ratio <= 1.0
    assert truth.requests_over_bound == 0
    assert truth.counters is not None and truth.counters.status == ct.AGREES
    assert truth.counters.source == "vllm"
    assert abs(truth.counters.difference or 0) < 0.01


def test_inflated_cache_reports_fail_even_when_the_counters_tell_the_same_story() -> None:
    _, truth = trial("cache_inflated")
    assert truth.verdict == ct.FAIL
    assert truth.ratio is not None and truth.ratio > 1.2
    assert truth.observed_share is not None and truth.observed_share > 0.99
    assert truth.observed_tokens is not None
    assert truth.observed_tokens > truth.theoretical_tokens + truth.slack_tokens
    assert truth.requests_over_bound == truth.requests  # every request claims its whole prompt
    # the lie is consistent (usage and counters), so conservation holds; the bound does not
    assert truth.counters is not None and truth.counters.status == ct.AGREES
    assert "cache shared across sessions, or hits over-reported" in truth.reasons[0]


def test_a_cache_shared_across_agents_finds_more_than_the_sessions_own_prefixes() -> None:
    _, honest = trial(None)
    _, shared = trial("cache_shared")
    assert shared.verdict == ct.FAIL
    assert shared.ratio is not None and honest.ratio is not None
    assert shared.ratio > honest.ratio + 0.15


def test_trial_json_carries_the_trials_cache_truth(tmp_path: Path) -> None:
    result, _ = trial(None, concurrency=2)
    write_trial(tmp_path, result)
    stored = json.loads((tmp_path / "trial.json").read_text())["summary"]["cache_truth"]
    assert result.summary.cache_truth is not None
    assert stored == result.summary.cache_truth.to_dict()
    assert stored["verdict"] == ct.PASS and stored["counters"] is None  # judged where scraped
