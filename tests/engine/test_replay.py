"""Replay pacing and request building, and whole trials, on virtual time."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

from agentperf.engine.replay import (
    NAMESPACE_TOKENS,
    Replay,
    ReplayConfig,
    SessionPrompt,
    build_request,
    render_completion_prompt,
)
from agentperf.engine.trajectory import Trajectory, Turn
from agentperf.engine.transport import ERROR_WRONG_LENGTH, RequestSpec
from agentperf.engine.trial import Tier, TrialConfig, evaluate_tiers, parse_tiers, run_trial
from tests.engine.virtual_time import PacedTransport, VirtualClock, run_virtual

TOOLS = ({"type": "function", "function": {"name": "bash", "parameters": {}}},)


def trajectory(tid: str, turns: int = 4, delay: float = 2.0, out: int = 11) -> Trajectory:
    built = []
    for k in range(turns):
        new = []
        if k:
            new.append({"role": "assistant", "content": f"{tid} recorded answer {k - 1}"})
        new.append({"role": "user", "content": f"{tid} step {k}"})
        built.append(
            Turn(
                keep_messages=2 * k if k else 0,
                new_messages=tuple(new),
                target_output_tokens=out + k,
                tool_delay_s=delay,
                message_tokens=tuple(10 for _ in new),
            )
        )
    first = built[0]
    built[0] = Turn(
        keep_messages=0,
        new_messages=({"role": "system", "content": "You are a coder."}, *first.new_messages),
        target_output_tokens=first.target_output_tokens,
        tool_delay_s=delay,
        message_tokens=(5, 10),
    )
    # keep_messages counts the system message from turn 1 on
    for k in range(1, turns):
        t = built[k]
        built[k] = Turn(
            keep_messages=2 * k - 1 + 1,
            new_messages=t.new_messages,
            target_output_tokens=t.target_output_tokens,
            tool_delay_s=t.tool_delay_s,
            message_tokens=t.message_tokens,
        )
    traj = Trajectory(id=tid, turns=tuple(built), tools=TOOLS)
    traj.validate()
    return traj


DATA = [trajectory(f"T{i}") for i in range(3)]


def replay(
    concurrency: int, *, stop_s: float, **config: object
) -> tuple[PacedTransport, list[object]]:
    async def main(clock: VirtualClock) -> tuple[PacedTransport, list[object]]:
        transport = PacedTransport(clock)
        cfg = ReplayConfig(model="m", **config)  # type: ignore[arg-type]
        r = Replay(transport, clock, DATA, cfg, concurrency)
        stop = clock.now_ns() + int(stop_s * 1e9)
        records = await r.run(stop_sending_at_ns=stop)
        assert r.in_flight == 0
        return transport, [stop, *records]

    return run_virtual(main)


def test_request_forces_the_output_length_and_streams_usage() -> None:
    spec = build_request(DATA[0], 2, ReplayConfig(model="m"), request_id="x")
    body = spec.body
    assert body["max_tokens"] == 13 == spec.target_output_tokens
    assert body["ignore_eos"] is True
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["tools"] == list(TOOLS)
    assert body["tool_choice"] == "none"
    assert "min_tokens" not in body
    with_min = build_request(DATA[0], 2, ReplayConfig(model="m", min_tokens=True), request_id="x")
    assert with_min.body["min_tokens"] == 13


def test_request_sends_the_recorded_conversation_and_its_token_counts() -> None:
    spec = build_request(DATA[0], 2, ReplayConfig(model="m", tool_choice="auto"), request_id="x")
    assert spec.body["messages"] == DATA[0].prompt(2)
    assert spec.body["tool_choice"] == "auto"
    assert spec.message_tokens == DATA[0].prompt_message_tokens(2)


def test_namespace_line_goes_first_in_the_first_message_only() -> None:
    line = "agentperf-session 00ff\n"
    spec = build_request(DATA[0], 1, ReplayConfig(model="m"), request_id="x", namespace=line)
    messages = spec.body["messages"]
    assert messages[0]["content"] == line + "You are a coder."
    assert messages[1:] == DATA[0].prompt(1)[1:]
    assert DATA[0].prompt(1)[0]["content"] == "You are a coder."  # dataset untouched
    assert spec.message_tokens is not None
    assert spec.message_tokens[0] == 5 + NAMESPACE_TOKENS


def test_a_session_prompt_advanced_turn_by_turn_builds_the_same_requests() -> None:
    # Shrinking prompts (ephemeral messages dropped), a restart from nothing, a turn
    # without counts: the incremental prompt must equal the one built from the trajectory.
    sys = {"role": "system", "content": "sys"}
    turns = (
        Turn(0, (sys, {"role": "user", "content": "a"}), 5, message_tokens=(3, 1)),
        Turn(
            2,
            ({"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}),
            5,
            message_tokens=(1, 1),
        ),
        Turn(3, ({"role": "user", "content": "d"},), 5, message_tokens=(1,)),
        Turn(0, ({"role": "system", "content": "new"},), 5, message_tokens=(2,)),
        Turn(1, ({"role": "user", "content": "e"},), 5),
        Turn(2, ({"role": "user", "content": "f"},), 5, message_tokens=(1,)),
    )
    traj = Trajectory(id="shrink", turns=turns, tools=TOOLS)
    traj.validate()
    cfg = ReplayConfig(model="m")
    for namespace in ("", "agentperf-session 0123456789abcdef\n"):
        for k0 in range(len(turns)):
            prompt = SessionPrompt(traj, k0, namespace)
            for k in range(k0, len(turns)):
                if k > k0:
                    prompt.advance()
                fast = build_request(
                    traj, k, cfg, request_id="x", namespace=namespace, prompt=prompt
                )
                slow = build_request(traj, k, cfg, request_id="x", namespace=namespace)
                assert fast.body == slow.body, (namespace, k0, k)
                assert fast.message_tokens == slow.message_tokens, (namespace, k0, k)
            if namespace and k0 == 0:
                assert fast.body["messages"][0]["content"].startswith("agentperf-session")


def test_completions_api_renders_one_prompt_without_tools() -> None:
    cfg = ReplayConfig(model="m", api="completions")
    spec = build_request(DATA[0], 1, cfg, request_id="x")
    assert "messages" not in spec.body and "tools" not in spec.body
    assert spec.body["prompt"] == render_completion_prompt(DATA[0].prompt(1))
    assert spec.body["prompt"].endswith("<|assistant|>\n")


def test_agents_walk_turns_in_order_and_never_send_live_output() -> None:
    transport, _ = replay(3, stop_s=200, tool_delay_scale=0.5)
    by_session: dict[str, list[int]] = defaultdict(list)
    for spec in transport.specs:
        by_session[spec.session_id].append(spec.turn_index)
        assert "LIVE OUTPUT" not in str(spec.body["messages"])
    for turns in by_session.values():
        assert turns == list(range(turns[0], turns[0] + len(turns)))
    # later sessions of an agent start at turn 0; only the first may start mid-trajectory
    assert all(t[0] == 0 for s, t in by_session.items() if not s.endswith("s0"))


def test_each_session_has_its_own_namespace_line() -> None:
    transport, _ = replay(4, stop_s=120)
    lines: dict[str, set[str]] = defaultdict(set)
    for spec in transport.specs:
        lines[spec.session_id].add(spec.body["messages"][0]["content"].split("\n", 1)[0])
    assert all(len(v) == 1 for v in lines.values())
    firsts = [next(iter(v)) for v in lines.values()]
    assert len(set(firsts)) == len(firsts)
    assert all(f.startswith("agentperf-session ") for f in firsts)


def test_the_namespace_salt_changes_every_namespace_and_nothing_else() -> None:
    def sessions(salt: str) -> tuple[list[tuple[int, str, int]], set[str]]:
        transport, _ = replay(3, stop_s=60, namespace_salt=salt)
        plan = [(s.agent_id, s.trajectory_id, s.turn_index) for s in transport.specs]
        lines = {s.body["messages"][0]["content"].split("\n", 1)[0] for s in transport.specs}
        return plan, lines

    plan_a, lines_a = sessions("run7.t0")
    plan_b, lines_b = sessions("run7.t1")
    assert plan_a == plan_b  # same agents, trajectories and turns
    assert not lines_a & lines_b  # but no namespace in common: trial 1 cannot reuse trial 0
    assert sessions("run7.t0")[1] == lines_a  # and still deterministic


def test_tool_delay_is_slept_end_to_start_with_the_scale_factor() -> None:
    transport, _ = replay(1, stop_s=100, tool_delay_scale=0.25)
    ex = transport.exchanges
    specs = transport.specs
    gaps = [
        (b.t_send_ns - (a.t_end_ns or 0)) / 1e9
        for a, b, sa, sb in zip(ex, ex[1:], specs, specs[1:], strict=False)
        if sa.session_id == sb.session_id
    ]
    assert gaps
    assert all(math.isclose(g, 0.5, abs_tol=1e-6) for g in gaps)


def test_agents_start_spread_over_the_ramp_at_random_turns() -> None:
    transport, _ = replay(8, stop_s=100, ramp_s=8.0)
    first_send: dict[int, int] = {}
    first_turn: dict[int, int] = {}
    for spec, ex in zip(transport.specs, transport.exchanges, strict=True):
        first_send.setdefault(spec.agent_id, ex.t_send_ns)
        first_turn.setdefault(spec.agent_id, spec.turn_index)
    t0 = min(first_send.values())
    offsets = sorted((t - t0) / 1e9 for t in first_send.values())
    assert offsets == pytest.approx([float(i) for i in range(8)], abs=1e-6)
    assert len(set(first_turn.values())) > 1


def test_same_seed_gives_the_same_requests_and_another_seed_does_not() -> None:
    def plan(seed: int) -> list[tuple[int, str, int]]:
        transport, _ = replay(3, stop_s=60, seed=seed)
        return [(s.agent_id, s.trajectory_id, s.turn_index) for s in transport.specs]

    assert plan(1) == plan(1)
    assert plan(1) != plan(2)


def test_no_request_is_sent_after_the_stop_and_all_sent_ones_finish() -> None:
    transport, result = replay(5, stop_s=30)
    stop = result[0]
    assert all(ex.t_send_ns < stop for ex in transport.exchanges)  # type: ignore[operator]
    assert len(result) - 1 == len(transport.specs)


def trial(tiers: list[Tier], *, fail_every: int = 0, out_tokens: int = 11, **kw: float) -> object:
    async def main(clock: VirtualClock) -> object:
        count = [0]

        def fail(spec: object) -> str | None:
            count[0] += 1
            return ERROR_WRONG_LENGTH if fail_every and count[0] % fail_every == 0 else None

        transport = PacedTransport(clock, ttft_s=0.5, tok_s=50.0, fail=fail)
        data = [trajectory(f"T{i}", out=out_tokens, delay=1.0) for i in range(3)]
        config = TrialConfig(
            concurrency=4,
            warmup_s=10,
            duration_s=120,
            accelerators=2,
            replay=ReplayConfig(model="m", ramp_s=4.0),
            min_requests=int(kw.get("min_requests", 20)),
        )
        return await run_trial(transport, clock, data, config, tiers)

    return run_virtual(main)


def test_trial_measures_the_fake_servers_speed_and_ttft_exactly() -> None:
    result = trial([Tier("easy", 40, 1.0), Tier("fast", 60, 1.0), Tier("snappy", 40, 0.4)])
    s = result.summary  # type: ignore[attr-defined]
    assert s.p25_output_speed == pytest.approx(50.0)
    assert s.ttft_s["p75"] == pytest.approx(0.5)
    assert s.error_rate == 0
    assert s.client.loop_lag_p99_ms is None  # virtual time: not measured
    verdicts = result.verdicts  # type: ignore[attr-defined]
    assert verdicts["easy"].passed
    assert not verdicts["fast"].passed and "p25 output speed" in verdicts["fast"].reasons[0]
    assert not verdicts["snappy"].passed and "TTFT" in verdicts["snappy"].reasons[0]
    # each agent is in flight ~0.73 s of every ~1.73 s (1 s tool delay): 4 x 0.42 = 1.69
    assert s.mean_in_flight == pytest.approx(1.69, abs=0.08)


def test_trial_fails_tiers_on_error_rate_and_on_too_few_requests() -> None:
    result = trial([Tier("easy", 1, 100, max_error_rate=0.05)], fail_every=10)
    v = result.verdicts["easy"]  # type: ignore[attr-defined]
    assert not v.passed and "error rate" in v.reasons[0]
    few = trial([Tier("easy", 1, 100)], min_requests=10_000)
    assert "requests measured" in few.verdicts["easy"].reasons[0]  # type: ignore[attr-defined]


def test_evaluate_tiers_uses_each_tiers_own_ttft_percentile() -> None:
    result = trial([Tier("p99", 1, 0.6, ttft_percentile=99)])
    v = evaluate_tiers(result.summary, [Tier("p99", 1, 0.6, ttft_percentile=99)], min_requests=1)  # type: ignore[attr-defined]
    assert v["p99"].passed and v["p99"].ttft_s == pytest.approx(0.5)


def test_tiers_json_is_validated() -> None:
    tiers = parse_tiers(
        [{"name": "20", "min_p25_output_speed": 20, "max_ttft_s": 10, "ttft_percentile": 75}]
    )
    assert tiers[0].max_error_rate == 0.01
    with pytest.raises(ValueError, match="unknown fields"):
        parse_tiers([{"name": "x", "min_p25_output_speed": 1, "max_ttft_s": 1, "speed": 3}])
    with pytest.raises(ValueError, match="missing field"):
        parse_tiers([{"name": "x", "max_ttft_s": 1}])


def _first_sessions(transport: PacedTransport) -> dict[int, tuple[str, str, int]]:
    first: dict[int, tuple[str, str, int]] = {}
    for spec in transport.specs:
        first.setdefault(spec.agent_id, (spec.session_id, spec.trajectory_id, spec.turn_index))
    return first


def test_the_first_trajectory_is_picked_in_proportion_to_its_turns() -> None:
    # One 9-turn and one 1-turn trajectory: an agent caught at a random moment of a long
    # run is in the long one 9 times out of 10, and that is where a random start puts it.
    data = [trajectory("LONG", turns=9), trajectory("SHORT", turns=1)]

    async def main(clock: VirtualClock) -> PacedTransport:
        transport = PacedTransport(clock)
        r = Replay(transport, clock, data, ReplayConfig(model="m"), 400)
        await r.run(stop_sending_at_ns=clock.now_ns() + 1)
        return transport

    first = _first_sessions(run_virtual(main))
    assert len(first) == 400
    long_share = sum(1 for _, tid, _ in first.values() if tid == "LONG") / 400
    assert 0.85 <= long_share <= 0.95
    long_turns = {k for _, tid, k in first.values() if tid == "LONG"}
    assert long_turns == set(range(9))  # and at any of its turns


class PrimingTransport(PacedTransport):
    """PacedTransport that also records primes (what the simulator's prime would cache)."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(clock)
        self.primed: list[tuple[int, RequestSpec]] = []

    def prime(self, spec: RequestSpec) -> None:
        self.primed.append((self.clock.now_ns(), spec))


def test_prime_cache_primes_each_agents_context_before_its_first_turn() -> None:
    async def main(clock: VirtualClock) -> tuple[PrimingTransport, int]:
        transport = PrimingTransport(clock)
        cfg = ReplayConfig(model="m", prime_cache=True, ramp_s=4.0)
        r = Replay(transport, clock, DATA, cfg, 12)
        t0 = clock.now_ns()
        records = await r.run(stop_sending_at_ns=t0 + int(30e9))
        assert len(records) == len(transport.specs)  # primes are not requests
        return transport, t0

    transport, t0 = run_virtual(main)
    first = _first_sessions(transport)
    primed = {spec.agent_id: spec for _, spec in transport.primed}
    assert all(t == t0 for t, _ in transport.primed)  # all before the first send
    for agent, (session, tid, k0) in first.items():
        if k0 == 0:
            assert agent not in primed  # a session's first turn starts cold
            continue
        spec = primed[agent]
        # the turn before, in the same session: same namespace line, a prefix of turn k0
        assert (spec.session_id, spec.trajectory_id, spec.turn_index) == (session, tid, k0 - 1)
        sent = next(s for s in transport.specs if s.session_id == session)
        n = len(spec.body["messages"]) - 1  # all but the user message the next turn replaces
        assert sent.body["messages"][:n] == spec.body["messages"][:n]
    assert len(primed) == sum(1 for _, _, k0 in first.values() if k0 > 0) > 0


def test_prime_cache_is_refused_by_a_transport_that_cannot_prime() -> None:
    async def main(clock: VirtualClock) -> None:
        Replay(PacedTransport(clock), clock, DATA, ReplayConfig(model="m", prime_cache=True), 2)

    with pytest.raises(ValueError, match="prime_cache needs a transport"):
        run_virtual(main)


def test_priming_changes_no_choice_of_the_agents() -> None:
    def plan(prime: bool) -> list[tuple[int, str, int, str]]:
        async def main(clock: VirtualClock) -> PacedTransport:
            transport = PrimingTransport(clock)
            cfg = ReplayConfig(model="m", prime_cache=prime, seed=3)
            await Replay(transport, clock, DATA, cfg, 6).run(
                stop_sending_at_ns=clock.now_ns() + int(60e9)
            )
            return transport

        specs = run_virtual(main).specs
        return [
            (s.agent_id, s.trajectory_id, s.turn_index, s.body["messages"][0]["content"])
            for s in specs
        ]

    assert plan(True) == plan(False)
