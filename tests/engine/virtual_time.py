"""A minimal virtual-time asyncio loop for engine tests that involve no sockets.

Time jumps to the next timer instead of waiting, so a trial of minutes runs in
milliseconds and every timestamp is exact. (The simulator ships the full-featured one;
this keeps the engine's own tests independent of it.)
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from agentperf.engine.transport import Exchange, RequestSpec

T = TypeVar("T")


class _JumpingSelector:
    def __init__(self, loop: VirtualTimeLoop, real: selectors.BaseSelector) -> None:
        self._loop = loop
        self._real = real

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is not None and timeout > 0:
            self._loop.virtual_now += timeout
        return self._real.select(0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self.virtual_now = 1000.0
        self._selector = _JumpingSelector(self, self._selector)  # type: ignore[has-type]

    def time(self) -> float:
        return self.virtual_now


class VirtualClock:
    def now_ns(self) -> int:
        return int(round(asyncio.get_running_loop().time() * 1e9))

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    @property
    def is_virtual(self) -> bool:
        return True


def run_virtual(main: Callable[[VirtualClock], Awaitable[T]]) -> T:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main(VirtualClock()))
    finally:
        loop.close()


class PacedTransport:
    """A fake server with fixed TTFT and decode speed, on the virtual clock.

    Fakes the server because these tests are about pacing and accounting, not HTTP; the
    HTTP path is tested against real sockets in test_client.py and llama.cpp.
    """

    def __init__(
        self,
        clock: VirtualClock,
        *,
        ttft_s: float = 0.5,
        tok_s: float = 50.0,
        fail: Callable[[RequestSpec], str | None] | None = None,
    ) -> None:
        self.clock = clock
        self.ttft_s = ttft_s
        self.tok_s = tok_s
        self.fail = fail
        self.specs: list[RequestSpec] = []
        self.exchanges: list[Exchange] = []

    async def send(self, spec: RequestSpec) -> Exchange:
        self.specs.append(spec)
        ex = Exchange(request_id=spec.request_id, t_send_ns=self.clock.now_ns())
        await self.clock.sleep(self.ttft_s)
        ex.t_first_ns = self.clock.now_ns()
        n = spec.target_output_tokens
        await self.clock.sleep((n - 1) / self.tok_s)
        ex.t_last_ns = ex.t_end_ns = self.clock.now_ns()
        ex.n_reads = ex.n_output_events = n
        ex.prompt_tokens = sum(spec.message_tokens or (100,))
        ex.completion_tokens = n
        ex.cached_tokens = 0
        ex.content = "LIVE OUTPUT"
        error = self.fail(spec) if self.fail else None
        if error:
            ex.error_class = error
        self.exchanges.append(ex)
        return ex

    async def aclose(self) -> None:
        return None
