"""The virtual loop's (when, handle) timer heap runs callbacks in exactly the order asyncio's
own heap of handles did, ties and cancellations included (docs/benchmarks.md "Rack scale in
under five minutes"); the records it gives are pinned by tests/simulator/test_pinned_records.py,
with this tree's simulator."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from agentperf.simulator.virtual import VirtualDeadlock, VirtualEventLoop, _NoIOSelector


class _AsyncioHeapLoop(asyncio.SelectorEventLoop):
    """The virtual loop as it was: asyncio's own _run_once over a heap of bare handles."""

    def __init__(self) -> None:
        self._vnow_ns = 0
        selector = _NoIOSelector()
        super().__init__(selector=selector)
        selector.loop = self  # type: ignore[assignment]

    def time(self) -> float:
        return self._vnow_ns / 1e9

    def _advance(self, timeout: float | None) -> None:
        if timeout is None:
            raise VirtualDeadlock("deadlock")
        if timeout <= 0:
            return
        scheduled = self._scheduled  # type: ignore[attr-defined]
        when = scheduled[0].when() if scheduled else self.time() + timeout
        target = round(when * 1e9)
        self._vnow_ns = target if target > self._vnow_ns else self._vnow_ns + 1


def _program(loop: asyncio.AbstractEventLoop, seed: int) -> list[tuple[Any, ...]]:
    """Timers on a coarse grid (many ties), timers that schedule more, call_soon, sleeping
    tasks, and a burst of cancellations large enough for asyncio's heap rebuild."""
    rnd = random.Random(seed)
    log: list[tuple[Any, ...]] = []

    def fire(label: int, depth: int) -> None:
        log.append(("timer", label, loop.time()))
        if depth < 2 and rnd.random() < 0.5:
            loop.call_at(loop.time() + rnd.choice([0.0, 0.001, 0.002]), fire, label * 10, depth + 1)
        if rnd.random() < 0.2:
            loop.call_soon(log.append, ("soon", label))

    async def sleeper(i: int) -> None:
        for _ in range(5):
            await asyncio.sleep(rnd.choice([0, 0.001, 0.002, 0.003]))
            log.append(("task", i, loop.time()))

    async def main() -> None:
        handles = [loop.call_at(rnd.choice([0.001, 0.002, 0.005]), fire, i, 0) for i in range(300)]
        for h in rnd.sample(handles, 220):  # > half of > 100 timers: asyncio rebuilds its heap
            h.cancel()
        await asyncio.gather(*(sleeper(i) for i in range(40)))
        await asyncio.sleep(0.01)

    loop.run_until_complete(main())
    loop.close()
    return log


@pytest.mark.parametrize("seed", range(5))
def test_callbacks_run_in_asyncios_order(seed: int) -> None:
    expected = _program(_AsyncioHeapLoop(), seed)
    assert len(expected) > 300
    assert _program(VirtualEventLoop(), seed) == expected
