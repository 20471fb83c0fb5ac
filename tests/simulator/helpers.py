"""Small closed-loop agent driver on virtual time, for the simulator's physics tests.

It is deliberately independent of the engine's replay so these tests pin the simulator's
behaviour alone: N agents walk multi-turn conversations (prompt = previous prompt + the
recorded answer + a new user message), sleep a tool delay, and start over after the last turn.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from agentperf.engine.transport import Clock, Exchange, RequestSpec, Transport
from agentperf.simulator.profile import Profile, load_profile
from agentperf.simulator.scheduler import Counters
from agentperf.simulator.virtual import SimTransport, run_with_simulator

FIXTURES = Path(__file__).parent / "fixtures"


@dataclass(slots=True)
class Summary:
    exchanges: list[Exchange]
    p25_speed: float
    mean_speed: float
    throughput_per_accelerator: float
    cached_ratio: float
    ttft_p75_s: float
    counters: Counters  # the deployment's counters at the end of the run


def tiny(**changes: object) -> Profile:
    """The bundled tiny profile with some fields replaced (dataclasses.replace)."""
    return dataclasses.replace(load_profile("tiny"), **changes)  # type: ignore[arg-type]


def _percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    i = max(0, min(len(s) - 1, int(q * len(s) + 0.5) - 1 if q > 0 else 0))
    return s[i]


def run_agents(
    profile: Profile,
    *,
    agents: int,
    turns: int = 4,
    first_tokens: int = 2000,
    new_tokens: int = 300,
    output_tokens: int = 100,
    tool_delay_s: float = 0.5,
    warmup_s: float = 10.0,
    window_s: float = 30.0,
    seed: int = 0,
    output_kind: str | None = None,
) -> Summary:
    end_ns = round((warmup_s + window_s) * 1e9)
    w0 = round(warmup_s * 1e9)
    out: list[Exchange] = []
    holder: list[SimTransport] = []

    async def main(transport: Transport, clock: Clock) -> None:
        async def agent(i: int) -> None:
            conv = 0
            # stagger the start so the agents do not move in lock step
            await clock.sleep((i % 17) * 0.05)
            while clock.now_ns() < end_ns:
                conv += 1
                msgs: list[dict[str, str]] = [
                    {"role": "system", "content": f"agent {i} conversation {conv}"}
                ]
                counts = [first_tokens]
                for t in range(turns):
                    msgs = [*msgs, {"role": "user", "content": f"a{i} c{conv} t{t} user"}]
                    counts = [*counts, new_tokens]
                    body = {
                        "model": profile.served_model_names[0],
                        "messages": msgs,
                        "max_tokens": output_tokens,
                        "ignore_eos": True,
                        "stream": True,
                    }
                    spec = RequestSpec(
                        request_id=f"a{i}-c{conv}-t{t}",
                        api="chat",
                        body=body,
                        target_output_tokens=output_tokens,
                        agent_id=i,
                        session_id=f"a{i}-c{conv}",
                        message_tokens=tuple(counts),
                        metadata={"output_kind": output_kind} if output_kind else None,
                    )
                    ex = await transport.send(spec)
                    out.append(ex)
                    msgs = [*msgs, {"role": "assistant", "content": f"a{i} c{conv} t{t} answer"}]
                    counts = [*counts, output_tokens]
                    if clock.now_ns() >= end_ns:
                        return
                    await clock.sleep(tool_delay_s)

        await asyncio.gather(*(agent(i) for i in range(agents)))

    run_with_simulator(profile, main, seed=seed, transport_out=holder)
    inside = [ex for ex in out if w0 <= ex.t_send_ns < end_ns and ex.t_last_ns is not None]
    assert inside, "no request completed inside the window"
    speeds = []
    for ex in inside:
        assert ex.ok, ex.error_detail
        assert ex.t_last_ns is not None and ex.t_first_ns is not None
        dt = (ex.t_last_ns - ex.t_first_ns) / 1e9
        speeds.append(((ex.completion_tokens or 0) - 1) / dt if dt > 0 else 0.0)
    tokens = sum((ex.prompt_tokens or 0) + (ex.completion_tokens or 0) for ex in inside)
    prompt = sum(ex.prompt_tokens or 0 for ex in inside)
    cached = sum(ex.cached_tokens or 0 for ex in inside)
    ttfts = [((ex.t_first_ns or 0) - ex.t_send_ns) / 1e9 for ex in inside]
    return Summary(
        exchanges=inside,
        p25_speed=_percentile(speeds, 0.25),
        mean_speed=sum(speeds) / len(speeds),
        throughput_per_accelerator=tokens / window_s / profile.accelerators_used,
        cached_ratio=cached / prompt,
        ttft_p75_s=_percentile(ttfts, 0.75),
        counters=holder[0].deployment.totals(),
    )


def max_agents_at(profile: Profile, *, speed: float, candidates: list[int]) -> int:
    """Highest candidate N whose p25 output speed is at least ``speed`` (0 if none)."""
    best = 0
    for n in candidates:
        if run_agents(profile, agents=n, warmup_s=5.0, window_s=15.0).p25_speed >= speed:
            best = n
        else:
            break
    return best


def synthetic_trajectories(n: int = 200, seed: int = 1) -> list:
    """The engine's synthetic dataset (stdlib text: the same on every machine)."""
    from agentperf.engine.datasets.corpus import build_corpus
    from agentperf.engine.datasets.synthetic import generate_dataset
    from agentperf.engine.tokens import TokenCounter

    counter = TokenCounter()
    corpus = build_corpus(counter, discover=False)
    return list(
        generate_dataset(seed=seed, trajectories=n, corpus=corpus, counter=counter).trajectories
    )
