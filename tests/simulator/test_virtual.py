"""Virtual-time mode: the loop jumps between timers; SimTransport answers like a server."""

from __future__ import annotations

import asyncio

import pytest

from agentperf.engine.transport import (
    ERROR_HTTP_STATUS,
    ERROR_TIMEOUT,
    Clock,
    RequestSpec,
    Transport,
)
from agentperf.simulator.prompts import FILLER_WORDS, PromptAccountant
from agentperf.simulator.virtual import VirtualDeadlock, run_with_simulator


def _spec(rid: str, text: str, **body: object) -> RequestSpec:
    b = {"model": "tiny-1b", "messages": [{"role": "user", "content": text}], "stream": True}
    b.update(body)
    return RequestSpec(
        request_id=rid, api="chat", body=b, target_output_tokens=int(b.get("max_tokens", 0))
    )


def test_virtual_time_advances_exactly_by_the_requested_sleep():
    async def main(transport: Transport, clock: Clock) -> tuple[int, int]:
        t0 = clock.now_ns()
        await clock.sleep(3600.0)
        return t0, clock.now_ns()

    t0, t1 = run_with_simulator("tiny", main, seed=0)
    assert (t0, t1) == (0, 3_600_000_000_000)


def test_waiting_forever_on_virtual_time_is_reported_as_a_deadlock():
    async def main(transport: Transport, clock: Clock) -> None:
        await asyncio.get_running_loop().create_future()

    with pytest.raises(VirtualDeadlock):
        run_with_simulator("tiny", main, seed=0)


def test_a_request_returns_exact_usage_and_model_timestamps():
    async def main(transport: Transport, clock: Clock):
        first = await transport.send(_spec("r1", "hello " * 500, max_tokens=50, ignore_eos=True))
        await clock.sleep(1.0)
        return first

    ex = run_with_simulator("tiny", main, seed=0)
    assert ex.ok and ex.completion_tokens == 50 and ex.finish_reason == "length"
    assert (
        ex.prompt_tokens
        == PromptAccountant()
        .chat({"messages": [{"role": "user", "content": "hello " * 500}]})
        .tokens
    )
    assert ex.t_send_ns < ex.t_first_ns < ex.t_last_ns == ex.t_end_ns
    assert ex.n_output_events == 50
    assert ex.content.startswith("".join(FILLER_WORDS))


def test_a_repeated_prefix_reports_cached_tokens_in_usage():
    async def main(transport: Transport, clock: Clock):
        text = "shared prefix " * 400
        a = await transport.send(_spec("a", text, max_tokens=10, ignore_eos=True))
        b = await transport.send(_spec("b", text, max_tokens=10, ignore_eos=True))
        return a, b

    a, b = run_with_simulator("tiny", main, seed=0)
    assert a.cached_tokens == 0
    assert b.cached_tokens == (b.prompt_tokens - 3) // 16 * 16  # whole blocks, not the priming


def test_without_ignore_eos_output_stops_at_a_seeded_point_no_earlier_than_min_tokens():
    async def main(transport: Transport, clock: Clock):
        out = []
        for i in range(20):
            spec = _spec(f"e{i}", f"q{i}", max_tokens=500, min_tokens=40)
            out.append(await transport.send(spec))
        return out

    runs = [run_with_simulator("tiny", main, seed=3) for _ in range(2)]
    lengths = [[ex.completion_tokens for ex in r] for r in runs]
    assert lengths[0] == lengths[1]
    assert all(40 <= n <= 500 for n in lengths[0]) and len(set(lengths[0])) > 5
    assert {ex.finish_reason for ex in runs[0] if ex.completion_tokens < 500} == {"stop"}


def test_a_prompt_longer_than_the_context_is_refused_with_http_400():
    async def main(transport: Transport, clock: Clock):
        spec = _spec("big", "x", max_tokens=10)
        spec.message_tokens = (200_000,)
        return await transport.send(spec)

    ex = run_with_simulator("tiny", main, seed=0)
    assert ex.error_class == ERROR_HTTP_STATUS and ex.http_status == 400
    assert "maximum context length" in ex.error_detail


def test_an_unknown_model_is_refused_with_http_404():
    async def main(transport: Transport, clock: Clock):
        return await transport.send(_spec("m", "hi", model="other", max_tokens=5))

    assert run_with_simulator("tiny", main, seed=0).http_status == 404


def test_filler_words_are_one_offline_token_each():
    acc = PromptAccountant()
    assert all(acc.count_text(w) == 1 for w in FILLER_WORDS)
    assert acc.count_text("".join(FILLER_WORDS) * 25) == 200


def test_a_request_past_its_timeout_fails_at_that_virtual_instant_and_others_finish():
    # tiny streams ~160 tok/s alone: 2,000 tokens take ~12 s; a 1 s timeout cuts it.
    async def main(transport: Transport, clock: Clock):
        slow = _spec("slow", "a", max_tokens=2000, ignore_eos=True)
        slow.timeout_s = 1.0
        fine = _spec("fine", "b", max_tokens=20, ignore_eos=True)
        fine.timeout_s = 600.0
        return await asyncio.gather(transport.send(slow), transport.send(fine))

    slow, fine = run_with_simulator("tiny", main, seed=0)
    assert slow.error_class == ERROR_TIMEOUT and slow.t_end_ns == 1_000_000_000
    assert fine.ok and fine.completion_tokens == 20


def test_a_session_prompt_is_accounted_the_same_with_and_without_its_session_cache():
    sys_msg = {"role": "system", "content": "system prompt " * 50}
    turns = [[sys_msg, {"role": "user", "content": f"step {i}"}] for i in range(3)]
    grown = turns[0] + [{"role": "assistant", "content": "ok"}, turns[1][1]]
    shrunk = grown[:2]  # a later turn that dropped messages
    tools = [{"type": "function", "function": {"name": "bash"}}]
    plain, cached = PromptAccountant(), PromptAccountant(identity_cache=True)
    for messages in (turns[0], grown, shrunk, turns[2], grown):
        body = {"messages": list(messages), "tools": list(tools)}
        assert cached.chat(body, session="s1") == plain.chat(body)


def test_a_primed_prompt_is_cached_for_the_next_turn_and_counts_as_no_request():
    history = [
        {"role": "system", "content": "You are a coder. " * 200},
        {"role": "user", "content": "fix the bug " * 300},
    ]
    turn = [*history, {"role": "assistant", "content": "done"}, {"role": "user", "content": "ok"}]

    def spec(rid: str, messages: list) -> RequestSpec:
        body = {"model": "tiny-1b", "messages": messages, "max_tokens": 5, "ignore_eos": True}
        return RequestSpec(
            request_id=rid, api="chat", body=body, target_output_tokens=5, session_id="a0s0"
        )

    def run(prime: bool):
        sims: list = []

        async def main(transport: Transport, clock: Clock):
            t0 = clock.now_ns()
            if prime:
                transport.prime(spec("p", history))  # type: ignore[attr-defined]
            assert clock.now_ns() == t0  # priming takes no virtual time
            return await transport.send(spec("r", turn))

        ex = run_with_simulator("tiny", main, seed=0, transport_out=sims)
        return ex, sims[0].deployment.totals()

    primed, counters = run(True)
    cold, _ = run(False)
    assert primed.ok and cold.ok and primed.prompt_tokens == cold.prompt_tokens
    assert cold.cached_tokens == 0
    history_tokens = PromptAccountant().chat({"messages": history}).tokens
    assert history_tokens - 64 <= primed.cached_tokens <= history_tokens
    assert primed.t_first_ns - primed.t_send_ns < cold.t_first_ns - cold.t_send_ns
    # only the real request is counted
    assert counters.prompt_tokens == primed.prompt_tokens
    assert counters.prefix_queries == primed.prompt_tokens
    assert counters.requests_finished == 1
