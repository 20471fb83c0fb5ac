"""The real-time simulator server's ``cache_inflated`` mode (python -m runner.twin_server
--behaviour tests.support.dishonest:parse=cache_inflated): usage and the /metrics hit counter both claim every prompt token
but the last as cached, so the window's counters tell the same lie as the requests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from agentperf.engine.client import HttpTransport
from agentperf.engine.transport import Exchange, RequestSpec
from agentperf.verification.speculative import parse_metrics, scrape_metrics
from runner.twin_server.server import ServerProcess, start_server
from tests.support import dishonest


@pytest.fixture(scope="module")
def inflated() -> Iterator[ServerProcess]:
    server = start_server("tiny", behaviour=dishonest.plugin("cache_inflated"))
    yield server
    server.stop()


def spec(rid: str, text: str) -> RequestSpec:
    return RequestSpec(
        request_id=rid,
        api="chat",
        body={
            "model": "tiny-1b",
            "messages": [{"role": "user", "content": text}],
            "max_tokens": 4,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        target_output_tokens=4,
    )


def test_a_cold_prompt_is_reported_all_but_its_last_token_cached_in_usage_and_counters(
    inflated: ServerProcess,
) -> None:
    async def main() -> list[Exchange]:
        transport = HttpTransport(inflated.base_url)
        try:
            return [
                await transport.send(spec(f"r{i}", f"agentperf-session {i:016x}\n" + "word " * 300))
                for i in range(2)
            ]
        finally:
            await transport.aclose()

    start = parse_metrics(scrape_metrics(inflated.base_url))
    answers = asyncio.run(main())
    end = parse_metrics(scrape_metrics(inflated.base_url))
    for ex in answers:
        assert ex.ok, ex.error_detail
        assert ex.prompt_tokens is not None and ex.prompt_tokens > 300
        # two different sessions, nothing cached for real: every token but the last claimed
        assert ex.cached_tokens == ex.prompt_tokens - 1
    hits = end["vllm:prefix_cache_hits"] - start["vllm:prefix_cache_hits"]
    assert hits == sum(ex.cached_tokens or 0 for ex in answers)
