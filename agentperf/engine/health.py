"""The load generator's own health over a trial's window (docs/engine.md "Client health").

Three measurements, on a real clock only:

- event-loop lag: how late a 10 ms sleep wakes up (a busy loop delays every callback);
- process CPU: CPU seconds over wall seconds of the window;
- first-token stamping delay: how long a network read waits between the bytes arriving and
  the loop stamping them. A thread writes its ``perf_counter_ns`` into one end of a socket
  pair every 10 ms; the loop's reader callback on the other end stamps the arrival the way
  the HTTP client stamps a stream's reads, and the difference is the delay every TTFT
  stamp of that moment carried.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time

from agentperf.engine.metrics import NS
from agentperf.engine.transport import Clock

LAG_PROBE_INTERVAL_S = 0.01
STAMP_PROBE_INTERVAL_S = 0.01
_STAMP = struct.Struct("!Q")


class StampProbe:
    """Measures the stamping delay of socket reads on the running loop (see module doc)."""

    def __init__(self, interval_s: float = STAMP_PROBE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.delays_ms: list[float] = []
        self._rx, self._tx = socket.socketpair()
        self._rx.setblocking(False)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, name="stamp-probe", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None

    def _write(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._tx.send(_STAMP.pack(time.perf_counter_ns()))
            except OSError:
                return

    def _readable(self) -> None:
        now = time.perf_counter_ns()
        try:
            data = self._rx.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        # Stamps that queued up behind a stalled loop all count: each waited that long.
        for (sent,) in _STAMP.iter_unpack(data[: len(data) - len(data) % _STAMP.size]):
            self.delays_ms.append(max(0, now - sent) / 1e6)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._rx.fileno(), self._readable)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._loop is not None:
            self._loop.remove_reader(self._rx.fileno())
            self._loop = None
        if self._thread.is_alive():
            self._thread.join(timeout=1)
        self._rx.close()
        self._tx.close()


async def monitor_health(
    clock: Clock,
    w0: int,
    w1: int,
    lags_ms: list[float],
    cpu: list[float],
    stamps_ms: list[float] | None = None,
) -> None:
    """Event-loop lag (sleep overshoot), process CPU and, when ``stamps_ms`` is given, the
    stamping delay, over [w0, w1) on a real clock."""
    wait = w0 - clock.now_ns()
    if wait > 0:
        await clock.sleep(wait / NS)
    probe = None
    if stamps_ms is not None:
        probe = StampProbe()
        probe.start()
    try:
        cpu0, wall0 = time.process_time(), clock.now_ns()
        while clock.now_ns() < w1:
            before = clock.now_ns()
            await clock.sleep(LAG_PROBE_INTERVAL_S)
            lag = (clock.now_ns() - before) / 1e6 - LAG_PROBE_INTERVAL_S * 1e3
            lags_ms.append(max(0.0, lag))
        wall = clock.now_ns() - wall0
        if wall > 0:
            cpu.append((time.process_time() - cpu0) * NS / wall * 100.0)
    finally:
        if probe is not None:
            probe.stop()
            if stamps_ms is not None:
                stamps_ms.extend(probe.delays_ms)
