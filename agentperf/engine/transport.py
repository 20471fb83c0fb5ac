"""The engine's transport interface: how one request reaches a server and comes back.

Two implementations exist: `agentperf.engine.client.HttpTransport` (real sockets, one
timestamp per network read) and `agentperf.simulator.virtual.SimTransport` (the simulated
serving system in process, on a virtual clock). Replay, metrics and search only ever see
`Transport` and `Clock`, so the same code measures a real endpoint and the simulator.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Api = Literal["chat", "completions"]

# Failure classes of a request (docs/engine.md "Definitions": a failed request counts as speed 0,
# TTFT +inf).
ERROR_CONNECT = "connect"
ERROR_HTTP_STATUS = "http_status"
ERROR_TIMEOUT = "timeout"
ERROR_DISCONNECT = "disconnect"
ERROR_WRONG_LENGTH = "wrong_length"
ERROR_PROTOCOL = "protocol"
ERROR_CLASSES = (
    ERROR_CONNECT,
    ERROR_HTTP_STATUS,
    ERROR_TIMEOUT,
    ERROR_DISCONNECT,
    ERROR_WRONG_LENGTH,
    ERROR_PROTOCOL,
)


@dataclass(slots=True)
class RequestSpec:
    """One request as the replay builds it; `body` is the OpenAI-compatible JSON body."""

    request_id: str
    api: Api
    body: dict[str, Any]
    target_output_tokens: int
    agent_id: int = 0
    session_id: str = ""
    trajectory_id: str = ""
    turn_index: int = 0
    # Local offline token count of each prompt message (same order as body["messages"]),
    # when the dataset carries them. The simulator uses them instead of re-tokenizing.
    message_tokens: tuple[int, ...] | None = None
    timeout_s: float = 600.0
    # The turn's dataset metadata (never sent to a server); the simulator reads the kind of
    # the recorded answer from it (``output_kind``, docs/simulator.md "Speculative decoding").
    metadata: dict[str, Any] | None = None


@dataclass(slots=True)
class Exchange:
    """Raw facts about one request, as observed by the client. No statistics here."""

    request_id: str
    t_send_ns: int
    t_first_ns: int | None = None  # arrival of the first event carrying visible output
    t_last_ns: int | None = None  # arrival of the last event carrying visible output
    t_end_ns: int | None = None  # stream closed / response complete
    n_reads: int = 0  # network reads (or simulated deliveries) carrying any bytes
    n_output_events: int = 0  # SSE events carrying visible output
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    content: str = ""
    reasoning: str = ""
    tool_calls_text: str = ""
    http_status: int | None = None
    error_class: str | None = None
    error_detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error_class is None


class Transport(Protocol):
    async def send(self, spec: RequestSpec) -> Exchange: ...

    async def aclose(self) -> None: ...


class PrimableTransport(Transport, Protocol):
    """A transport that can put a prompt in the server's prefix cache at no cost (the
    simulator on virtual time): what ``ReplayConfig.prime_cache`` uses instead of a long
    cold-start warm-up. Nothing is generated and no request is counted."""

    def prime(self, spec: RequestSpec) -> None: ...


class Clock(Protocol):
    """Monotonic time in nanoseconds and a way to wait. Real or virtual."""

    def now_ns(self) -> int: ...

    async def sleep(self, seconds: float) -> None: ...

    @property
    def is_virtual(self) -> bool: ...


class RealClock:
    """perf_counter_ns and asyncio.sleep: the clock of every real measurement."""

    __slots__ = ()

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    async def sleep(self, seconds: float) -> None:
        """At least ``seconds``: uvloop's timers count whole milliseconds from the time its
        loop cached at the start of its iteration, so one sleep can end early (by a
        millisecond or more on a busy loop); the remainder is slept again."""
        end = self.now_ns() + int(seconds * 1e9)
        await asyncio.sleep(max(0.0, seconds))
        while (left := end - self.now_ns()) > 0:
            await asyncio.sleep(left / 1e9)

    @property
    def is_virtual(self) -> bool:
        return False
