"""N agents replaying recorded trajectories (docs/engine.md "Replay decisions").

Each agent walks trajectories turn by turn: send the turn's full prompt (the *recorded*
conversation, never the live output), wait for the whole answer, sleep the recorded tool
delay measured from the end of the answer, go on. Every trajectory an agent starts is a new
session with its own cache namespace: a short random first line in the first message, so an
agent reuses its own prefixes but never another agent's.

All waiting goes through ``clock.sleep`` and all times through ``clock.now_ns()``, so the
same code runs on real time against a server and on virtual time against the simulator.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from agentperf.engine.cachetruth import PRIMED_TURN
from agentperf.engine.metrics import RequestRecord
from agentperf.engine.trajectory import Message, Trajectory
from agentperf.engine.transport import Api, Clock, PrimableTransport, RequestSpec, Transport

# Local token estimate of the namespace line (cl100k: "agentperf-session " + 16 hex + "\n").
NAMESPACE_TOKENS = 12

# How agents arrive (docs/engine.md "Arrival modes"): "closed" holds N agents, each starting
# its next turn when the last one ends; "open" starts sessions as a seeded Poisson process
# at rate_per_min, each runs one trajectory from its first turn and leaves.
ARRIVAL_CLOSED = "closed"
ARRIVAL_OPEN = "open"
ARRIVALS = (ARRIVAL_CLOSED, ARRIVAL_OPEN)


def _arrival_rng(seed: int) -> random.Random:
    return random.Random(f"agentperf-arrivals:{seed}")


def arrival_offsets_ns(seed: int, rate_per_min: float, count: int) -> list[int]:
    """The first ``count`` arrival times of the open loop, ns after the trial's start.

    Session i (agent id i) arrives at ``S_i * 60 / rate`` seconds, where S_i is the sum of
    i+1 unit-rate exponential draws of one seeded stream: the times depend only on the seed,
    the rate and i, never on which shard runs session i, and a higher rate compresses the
    same sequence.
    """
    if rate_per_min <= 0:
        raise ValueError("an open-loop arrival rate must be > 0 sessions per minute")
    rng = _arrival_rng(seed)
    scale = 60e9 / rate_per_min
    out: list[int] = []
    t = 0.0
    for _ in range(count):
        t += rng.expovariate(1.0)
        out.append(int(t * scale))
    return out


def open_sessions(seed: int, rate_per_min: float, horizon_s: float) -> int:
    """How many sessions arrive before ``horizon_s`` (the open loop's agent count)."""
    if rate_per_min <= 0:
        raise ValueError("an open-loop arrival rate must be > 0 sessions per minute")
    rng = _arrival_rng(seed)
    scale = 60.0 / rate_per_min
    t = rng.expovariate(1.0) * scale
    count = 0
    while t < horizon_s:
        count += 1
        t += rng.expovariate(1.0) * scale
    return count


@dataclass(slots=True)
class ReplayConfig:
    """How requests are built and paced. Defaults: docs/engine.md "Replay decisions"."""

    model: str
    api: Api = "chat"
    seed: int = 0
    tool_choice: str | dict[str, Any] | None = "none"
    tool_delay_scale: float = 1.0
    ramp_s: float = 0.0
    ignore_eos: bool = True
    min_tokens: bool = False  # also send min_tokens = target (vLLM, SGLang accept it)
    cache_namespace: bool = True
    # Mixed into every session's namespace: the search sets it per run attempt and trial, so
    # no session of one trial (or run) can find a prefix cached by another.
    namespace_salt: str = ""
    random_start_turn: bool = True
    timeout_s: float = 600.0
    extra_body: dict[str, Any] = field(default_factory=dict)
    # Count the streamed output locally (cl100k) beside the server's completion_tokens, the
    # cross-check the verification compares (a few microseconds per answer).
    count_output_tokens: bool = True
    # Start from a warm prefix cache: before the first request, each agent's context up to
    # its starting turn is put in the server's cache at no cost, as if the agents had been
    # running for a while. Only transports that can do that in process (the simulator on
    # virtual time) accept it; it spares a rack-scale trial the long cold-start warm-up.
    prime_cache: bool = False
    # Arrival mode and, for "open", the Poisson rate in sessions per minute (ARRIVALS).
    arrival: str = ARRIVAL_CLOSED
    rate_per_min: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "api": self.api,
            "seed": self.seed,
            "tool_choice": self.tool_choice,
            "tool_delay_scale": self.tool_delay_scale,
            "ramp_s": self.ramp_s,
            "ignore_eos": self.ignore_eos,
            "min_tokens": self.min_tokens,
            "cache_namespace": self.cache_namespace,
            "namespace_salt": self.namespace_salt,
            "random_start_turn": self.random_start_turn,
            "timeout_s": self.timeout_s,
            "extra_body": self.extra_body,
            "count_output_tokens": self.count_output_tokens,
            "prime_cache": self.prime_cache,
            "arrival": self.arrival,
            "rate_per_min": self.rate_per_min,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReplayConfig:
        """The inverse of ``to_dict`` (a shard's settings travel as JSON)."""
        return cls(**{f: data[f] for f in cls.__dataclass_fields__ if f in data})


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return "" if content is None else str(content)


def render_completion_prompt(messages: Sequence[Message]) -> str:
    """A chat conversation as one text prompt for the completions API.

    A neutral, documented template (docs/engine.md): ``<|role|>\\n`` + text per message,
    tool calls as their JSON, then ``<|assistant|>\\n`` to open the answer.
    """
    parts: list[str] = []
    for m in messages:
        text = _text_of(m.get("content"))
        calls = m.get("tool_calls")
        if calls:
            text += orjson.dumps(calls).decode()
        parts.append(f"<|{m.get('role', 'user')}|>\n{text}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


def with_namespace(messages: list[Message], line: str) -> list[Message]:
    """``messages`` with ``line`` prepended to the first message's text (a new first dict)."""
    if not messages:
        return messages
    first = dict(messages[0])
    content = first.get("content")
    if isinstance(content, list):
        first["content"] = [{"type": "text", "text": line}, *content]
    else:
        first["content"] = line + ("" if content is None else str(content))
    return [first, *messages[1:]]


class SessionPrompt:
    """One session's prompt, advanced turn by turn (turn k = turn k−1 cut to
    ``keep_messages`` plus ``new_messages``), with the namespace line in its first message.

    The namespaced first message is one object for the whole session (until a turn replaces
    it), so a server that caches by identity sees the same object on every turn.
    """

    __slots__ = ("trajectory", "namespace", "k", "messages", "_counts", "_first")

    def __init__(self, trajectory: Trajectory, k: int, namespace: str) -> None:
        self.trajectory = trajectory
        self.namespace = namespace
        self.k = k
        self.messages: list[Message] = trajectory.prompt(k)
        counts = trajectory.prompt_message_tokens(k)
        self._counts: list[int] | None = None if counts is None else list(counts)
        self._first: Message | None = None
        self._mark_first()

    @property
    def counts(self) -> tuple[int, ...] | None:
        if self._counts is None:
            return None
        if self.namespace and self._counts:
            return (self._counts[0] + NAMESPACE_TOKENS, *self._counts[1:])
        return tuple(self._counts)

    def _mark_first(self) -> None:
        if self.namespace and self.messages and self.messages[0] is not self._first:
            self.messages = with_namespace(self.messages, self.namespace)
            self._first = self.messages[0]

    def advance(self) -> None:
        """Move to the next turn."""
        self.k += 1
        turn = self.trajectory.turns[self.k]
        del self.messages[turn.keep_messages :]
        self.messages.extend(turn.new_messages)
        if self._counts is not None:
            if turn.message_tokens is None:
                self._counts = None
            else:
                del self._counts[turn.keep_messages :]
                self._counts.extend(turn.message_tokens)
        self._mark_first()


def build_request(
    trajectory: Trajectory,
    k: int,
    config: ReplayConfig,
    *,
    request_id: str,
    agent_id: int = 0,
    session_id: str = "",
    namespace: str = "",
    prompt: SessionPrompt | None = None,
) -> RequestSpec:
    """The request of turn ``k`` of ``trajectory`` (forced output length, streaming, usage).

    ``prompt``, when given, is the session's prompt already advanced to turn ``k`` (what
    the replay keeps per session so a turn costs its new messages, not its history); it
    yields the same messages and counts as computing them from the trajectory.
    """
    turn = trajectory.turns[k]
    target = turn.target_output_tokens
    if prompt is not None:
        messages = list(prompt.messages)
        counts = prompt.counts
    else:
        messages = trajectory.prompt(k)
        counts = trajectory.prompt_message_tokens(k)
        if namespace:
            messages = with_namespace(messages, namespace)
            if counts:
                counts = (counts[0] + NAMESPACE_TOKENS, *counts[1:])
    body: dict[str, Any] = {"model": config.model}
    if config.api == "chat":
        body["messages"] = messages
        tools = trajectory.tools_for(k)
        if tools:
            body["tools"] = list(tools)
            if config.tool_choice is not None:
                body["tool_choice"] = config.tool_choice
    else:
        body["prompt"] = render_completion_prompt(messages)
    body["max_tokens"] = target
    if config.ignore_eos:
        body["ignore_eos"] = True
    if config.min_tokens:
        body["min_tokens"] = target
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    body.update(config.extra_body)
    return RequestSpec(
        request_id=request_id,
        api=config.api,
        body=body,
        target_output_tokens=target,
        agent_id=agent_id,
        session_id=session_id,
        trajectory_id=trajectory.id,
        turn_index=k,
        message_tokens=counts if config.api == "chat" else None,
        timeout_s=config.timeout_s,
        metadata=turn.metadata or None,
    )


@dataclass(slots=True)
class _Session:
    trajectory: Trajectory
    k0: int
    session_id: str
    namespace: str
    prompt: SessionPrompt | None = None  # already at turn k0 (set when the cache was primed)


class _AgentState:
    """One agent's seeded choices: trajectory order, starting turn, session namespaces."""

    __slots__ = (
        "agent_id",
        "rng",
        "ns_rng",
        "order",
        "position",
        "session_no",
        "sent",
        "_first",
        "_r",
    )

    def __init__(self, replay: Replay, agent_id: int) -> None:
        config = replay.config
        self._r = replay
        self.agent_id = agent_id
        self.rng = random.Random(f"agentperf:{config.seed}:{agent_id}")
        # Namespaces come from their own stream, so the salt changes them and nothing else.
        self.ns_rng = random.Random(
            f"agentperf-ns:{config.seed}:{config.namespace_salt}:{agent_id}"
        )
        self.order = list(range(len(replay.trajectories)))
        self.rng.shuffle(self.order)
        self.position = 0
        self.session_no = 0
        self.sent = 0  # requests this agent has sent: its request ids do not depend on others
        self._first: _Session | None = None

    def first_session(self) -> _Session:
        if self._first is None:
            # an open-loop session is a new task: its trajectory from the first turn
            first = self._r.config.arrival != ARRIVAL_OPEN
            self._first = self.next_session(first=first)
        return self._first

    def next_session(self, *, first: bool = False) -> _Session:
        config = self._r.config
        if first and config.random_start_turn:
            # A uniformly random turn of the whole dataset, so a trajectory is picked in
            # proportion to its turns: an agent that has been running for a while is in a
            # long trajectory more often than in a short one, and starting agents that way
            # puts the window's context mix at its steady state from the start. The agent
            # then goes on in its shuffled order after that trajectory.
            offsets = self._r.turn_offsets
            r = self.rng.randrange(offsets[-1])
            j = bisect.bisect_right(offsets, r) - 1
            k0 = r - offsets[j]
            self.position = self.order.index(j) + 1
            trajectory = self._r.trajectories[j]
        else:
            if self.position == len(self.order):
                self.rng.shuffle(self.order)
                self.position = 0
            trajectory = self._r.trajectories[self.order[self.position]]
            self.position += 1
            k0 = 0
        session_id = f"a{self.agent_id}s{self.session_no}"
        self.session_no += 1
        namespace = (
            f"agentperf-session {self.ns_rng.getrandbits(64):016x}\n"
            if config.cache_namespace
            else ""
        )
        return _Session(trajectory, k0, session_id, namespace)


class Replay:
    """``concurrency`` agents sending until ``stop_sending_at_ns``; finished requests are
    appended to ``records`` (and passed to ``on_record``) as they complete.

    With ``config.arrival == "open"`` each agent is one session of the open loop: agent i
    arrives at ``arrival_offsets_ns(seed, rate, N)[i]`` after the start, replays one
    trajectory (its seeded pick) from the first turn with its tool delays, and leaves;
    ``concurrency`` is then the number of sessions (``open_sessions`` over the trial).

    ``agent_ids`` runs only those agents of the ``concurrency`` (a shard of a sharded trial,
    docs/engine.md "Sharded trials"): each agent's seeds, start time on the ramp and request
    ids are those it has in the whole trial, so K shards send the requests one process
    would. ``keep_records=False`` only passes records to ``on_record`` (a shard streams
    them to disk instead of holding them).
    """

    def __init__(
        self,
        transport: Transport,
        clock: Clock,
        trajectories: Sequence[Trajectory],
        config: ReplayConfig,
        concurrency: int,
        *,
        on_record: Callable[[RequestRecord], None] | None = None,
        agent_ids: Sequence[int] | None = None,
        keep_records: bool = True,
    ) -> None:
        if not trajectories:
            raise ValueError("no trajectories to replay")
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if config.arrival not in ARRIVALS:
            raise ValueError(
                f"arrival must be one of {', '.join(ARRIVALS)}, got {config.arrival!r}"
            )
        if config.arrival == ARRIVAL_OPEN and not config.rate_per_min > 0:
            raise ValueError("an open-loop replay needs rate_per_min > 0")
        if config.prime_cache and not callable(getattr(transport, "prime", None)):
            raise ValueError(
                "prime_cache needs a transport that can fill its prefix cache in process "
                "(the simulator on virtual time); a real endpoint warms up by serving"
            )
        self.transport = transport
        self.clock = clock
        self.trajectories = list(trajectories)
        # turn_offsets[j] = turns before trajectory j; the last entry is the total.
        self.turn_offsets = [0, *itertools.accumulate(len(t.turns) for t in self.trajectories)]
        self.config = config
        self.concurrency = concurrency
        self.agent_ids = list(range(concurrency)) if agent_ids is None else list(agent_ids)
        if any(not 0 <= a < concurrency for a in self.agent_ids):
            raise ValueError(f"agent ids must lie in [0, {concurrency})")
        self.keep_records = keep_records
        self.on_record = on_record
        self.records: list[RequestRecord] = []
        self.in_flight = 0
        self._stop_ns = 0
        self._count: Callable[[str], int] | None = None
        if config.count_output_tokens:
            from agentperf.engine.tokens import shared_counter

            # one per process: a search's trials count the same texts (its cache outlives
            # a trial; the counts are those of a fresh counter)
            self._count = shared_counter().count

    async def run(
        self, *, stop_sending_at_ns: int, start_ns: int | None = None
    ) -> list[RequestRecord]:
        """Run every agent; returns once no agent will send again and none is in flight.

        The ramp starts at ``start_ns`` (default: now): agent i starts at
        ``start + ramp * i // concurrency``."""
        self._stop_ns = stop_sending_at_ns
        start = self.clock.now_ns() if start_ns is None else start_ns
        n = self.concurrency
        ramp_ns = int(self.config.ramp_s * 1e9)
        states = [_AgentState(self, i) for i in self.agent_ids]
        if self.config.arrival == ARRIVAL_OPEN:
            # every session starts at its first turn: nothing to prime, no ramp
            offsets = arrival_offsets_ns(self.config.seed, self.config.rate_per_min, n)
            agents = [
                asyncio.ensure_future(self._agent(state, start + offsets[state.agent_id]))
                for state in states
            ]
        else:
            if self.config.prime_cache:
                self._prime(states)
            agents = [
                asyncio.ensure_future(self._agent(state, start + ramp_ns * state.agent_id // n))
                for state in states
            ]
        try:
            await asyncio.gather(*agents)
        finally:
            for task in agents:
                task.cancel()
        return self.records

    def _prime(self, states: Sequence[_AgentState]) -> None:
        """Put each agent's context before its first turn in the server's prefix cache."""
        prime = cast(PrimableTransport, self.transport).prime
        for state in states:
            session = state.first_session()
            if session.k0 == 0:
                continue  # a session's first turn is cold in steady state too
            prompt = SessionPrompt(session.trajectory, session.k0 - 1, session.namespace)
            spec = build_request(
                session.trajectory,
                session.k0 - 1,
                self.config,
                request_id=f"{session.session_id}t{session.k0 - 1}prime",
                agent_id=state.agent_id,
                session_id=session.session_id,
                namespace=session.namespace,
                prompt=prompt,
            )
            prime(spec)
            prompt.advance()
            session.prompt = prompt

    async def _sleep_until(self, t_ns: int) -> None:
        """Never wakes before ``t_ns``: each clock's sleep lasts at least what it is asked
        (RealClock sleeps again where uvloop's timer ended early)."""
        wait = t_ns - self.clock.now_ns()
        if wait > 0:
            await self.clock.sleep(wait / 1e9)

    async def _agent(self, state: _AgentState, start_ns: int) -> None:
        config = self.config
        agent_id = state.agent_id
        first: _Session | None = state.first_session()  # drawn before the start: same draws
        once = config.arrival == ARRIVAL_OPEN  # an open-loop session leaves after its task
        await self._sleep_until(min(start_ns, self._stop_ns))
        while self.clock.now_ns() < self._stop_ns:
            if first is None and once:
                return
            session = first if first is not None else state.next_session()
            first = None
            trajectory, k0 = session.trajectory, session.k0
            session_id, namespace = session.session_id, session.namespace
            prompt = session.prompt or SessionPrompt(trajectory, k0, namespace)
            for k in range(k0, len(trajectory.turns)):
                if self.clock.now_ns() >= self._stop_ns:
                    return
                if k > k0:
                    prompt.advance()
                state.sent += 1
                spec = build_request(
                    trajectory,
                    k,
                    config,
                    request_id=f"{session_id}t{k}r{state.sent}",
                    agent_id=agent_id,
                    session_id=session_id,
                    namespace=namespace,
                    prompt=prompt,
                )
                self.in_flight += 1
                try:
                    exchange = await self.transport.send(spec)
                finally:
                    self.in_flight -= 1
                record = RequestRecord.from_exchange(spec, exchange, count_tokens=self._count)
                if k == k0 and session.prompt is not None:
                    # the server's cache held turn k0-1 of this session before it was sent:
                    # verification's cache bound counts it as sent (cache_honesty)
                    record.extra[PRIMED_TURN] = k0 - 1
                if self.keep_records:
                    self.records.append(record)
                if self.on_record is not None:
                    self.on_record(record)
                # Tool delay, end to start: measured from the end of the answer, so time the
                # client spent after the stream closed (parsing) is not added to it.
                delay_ns = int(trajectory.turns[k].tool_delay_s * config.tool_delay_scale * 1e9)
                end = exchange.t_end_ns if exchange.t_end_ns is not None else self.clock.now_ns()
                await self._sleep_until(min(end + delay_ns, self._stop_ns))
