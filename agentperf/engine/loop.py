"""The event loop a measurement runs on: a fresh uvloop for the real clock (`run_real`), and
a garbage collector kept out of its timestamps (`quiet_gc`). A whole run (agentperf/engine/jobs.py),
a shard process (agentperf/engine/sharding.py), the shard calibration (agentperf/engine/shard_cli.py)
and the simulator's calibration all run this way (docs/engine.md "Sharded trials")."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


def quiet_gc() -> None:
    """Keep the cyclic garbage collector from pausing the event loop during a measurement.

    Everything allocated so far (dataset, modules) is frozen out of the collector's scans,
    and young-generation collections run less often: parsing streams allocates many small
    short-lived dicts, and a full collection over a large heap would stall every stream's
    timestamps for tens of milliseconds. Reference counting still frees everything promptly.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def run_real(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a new uvloop event loop (the real clock), then close it."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)
