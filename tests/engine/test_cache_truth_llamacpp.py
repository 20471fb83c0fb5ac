"""Cache truth against a REAL llama.cpp server (xllamacpp, tiny GGUF): its usage
``cached_tokens``, its final ``timings.cache_n`` and its /metrics counters against the
sessions' own prefixes (docs/metrics.md "Cache truth")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentperf.engine import cachetruth as ct
from agentperf.engine.client import HttpTransport
from agentperf.engine.metrics import RequestRecord
from agentperf.engine.replay import Replay, ReplayConfig
from agentperf.engine.trajectory import Trajectory, Turn
from agentperf.engine.transport import RealClock
from agentperf.verification.speculative import parse_metrics, scrape_metrics

pytestmark = pytest.mark.llamacpp

SYSTEM = "You are a careful coding agent. " * 60  # a few hundred tokens: worth caching


def conversation(turns: int) -> Trajectory:
    """Each turn appends the recorded answer and a tool output to the turn before."""
    first = Turn(
        0, ({"role": "system", "content": SYSTEM}, {"role": "user", "content": "Fix the bug."}), 8
    )
    rest = [
        Turn(
            2 * k,
            (
                {"role": "assistant", "content": f"Reading file {k}."},
                {"role": "tool", "content": f"def f{k}(x):\n    return x + {k}\n" * 8},
            ),
            8,
        )
        for k in range(1, turns)
    ]
    return Trajectory(id="conversation", turns=(first, *rest))


def replay(
    base_url: str, trajectory: Trajectory, config: ReplayConfig, *, agents: int, requests: int
) -> tuple[list[RequestRecord], dict[str, float], dict[str, float]]:
    """``requests`` requests of ``agents`` agents, with the server's counters before and
    after them (the window's edges)."""

    async def main() -> tuple[list[RequestRecord], dict[str, float], dict[str, float]]:
        transport = HttpTransport(base_url)
        clock = RealClock()
        start = parse_metrics(await asyncio.to_thread(scrape_metrics, base_url))
        run = Replay(transport, clock, [trajectory], config, agents)
        records: list[RequestRecord] = []

        def stop_after(record: RequestRecord) -> None:
            records.append(record)
            if len(records) >= requests:
                run._stop_ns = 0  # send nothing more

        run.on_record = stop_after
        try:
            await run.run(stop_sending_at_ns=clock.now_ns() + 120 * 10**9)
        finally:
            await transport.aclose()
        end = parse_metrics(await asyncio.to_thread(scrape_metrics, base_url))
        return records, start, end

    return asyncio.run(main())


def judged(
    records: list[RequestRecord],
    trajectory: Trajectory,
    start: dict[str, float],
    end: dict[str, float],
) -> ct.CacheTruth:
    assert all(r.ok for r in records), [r.error_detail for r in records]
    return ct.summarize_cache_truth(
        records,
        [trajectory],
        window_start_ns=min(r.t_send_ns for r in records),
        window_end_ns=max(r.t_send_ns for r in records) + 1,
        counters_start=start,
        counters_end=end,
    )


def test_one_agents_session_reuses_its_own_prefix_as_the_dataset_allows(llama_server: Any) -> None:
    trajectory = conversation(4)
    config = ReplayConfig(model="tiny", random_start_turn=False)
    records, start, end = replay(llama_server.base_url, trajectory, config, agents=1, requests=4)
    truth = judged(records, trajectory, start, end)
    # usage's cached_tokens and the final timings' cache_n are the same count
    for r in records:
        assert r.n_cached == r.extra["server_timings"]["cache_n"], r.extra
    assert truth.source == ct.SOURCE_USAGE and truth.requests == 4
    # each turn finds the turn before it whole (llama.cpp keeps the exact token prefix, the
    # assistant header included): observed is the theoretical, to a chance token or two
    assert truth.theoretical_tokens == sum(r.n_in or 0 for r in records[:3])
    assert truth.observed_tokens is not None
    assert abs(truth.observed_tokens - truth.theoretical_tokens) <= 8
    assert truth.verdict == ct.PASS, truth.reasons
    # llama.cpp's /metrics: prompt tokens processed and taken from the cache
    assert truth.counters is not None and truth.counters.source == "llamacpp"
    assert truth.counters.status == ct.AGREES
    assert truth.counters.queries == truth.prompt_tokens
    assert truth.counters.hits == truth.observed_tokens


def test_sessions_without_namespaces_on_one_slot_reuse_each_other_and_fail(
    llama_server_factory: Any,
) -> None:
    server = llama_server_factory(n_parallel=1, ctx_per_slot=4096, n_threads=1)
    trajectory = conversation(2)
    # no namespace line: the second agent's first prompt is the first agent's, byte for byte
    config = ReplayConfig(model="tiny", random_start_turn=False, cache_namespace=False)
    records, start, end = replay(server.base_url, trajectory, config, agents=2, requests=2)
    truth = judged(records, trajectory, start, end)
    firsts = sorted((r for r in records if r.turn_index == 0), key=lambda r: r.t_first_ns or 0)
    assert [r.agent_id for r in firsts] in ([0, 1], [1, 0])
    bounds = ct.request_bounds(records, {trajectory.id: trajectory})
    assert [bounds[r.request_id].theoretical for r in firsts] == [0, 0]  # nothing of their own
    # the slot served the first agent's prompt, and the second agent's first turn found it
    assert firsts[1].n_cached is not None and firsts[1].n_in is not None
    assert firsts[1].n_cached >= firsts[1].n_in - 1 > 300
    assert truth.observed_tokens is not None
    assert truth.observed_tokens > truth.theoretical_tokens + truth.slack_tokens
    assert truth.verdict == ct.FAIL
    assert truth.counters is not None and truth.counters.status == ct.AGREES
