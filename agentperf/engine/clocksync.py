"""Clock alignment and the common start of a sharded trial (docs/engine.md "Sharded trials").

Per-request metrics are deltas on one shard's own monotonic clock and need no alignment.
Only the measurement window's boundaries and the throughput attribution compare times
across shards, so each shard measures the offset of its monotonic clock to the
coordinator's, NTP-style: it sends a probe at ``t0``, the coordinator answers with its own
time ``tc``, the answer arrives at ``t1``; ``offset = tc − (t0 + t1) / 2`` is exact up to
the round trip's asymmetry, so its uncertainty is ``(t1 − t0) / 2``. Of many round trips
the tightest is kept. The same exchange carries the start instant: the coordinator
answers 0 until every shard has said hello (loaded its dataset and is ready), then the
instant on its own clock at which the ramp starts.

The coordinator side is a UDP socket served by its own thread (``SyncServer``), so its
answers are not delayed by the coordinator's event loop. Packets carry a random trial
token; any other packet is ignored.

The same channel stops a shard (docs/engine.md "Sharded trials", docs/security.md "An
abandoned attempt stops"): once the coordinator abandons a trial attempt it answers every
hello with ``STOP`` for ``STOP_LINGER_S``, and a shard stops sending at the first such
answer to its keep-alive (every ``KEEPALIVE_S``), so within ``KEEPALIVE_S`` plus a round
trip; a shard whose keep-alives get no answer for ``COORDINATOR_SILENT_S`` (the coordinator
is gone) stops too.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# hello: token (16 bytes), shard (u32), nonce (u64) ; answer: nonce, coordinator ns, start ns
_HELLO = struct.Struct("!16sIQ")
_ANSWER = struct.Struct("!QqQ")
MAX_UNCERTAINTY_NS = 1_000_000  # a trial is invalid when a shard's offset is less sure
PROBE_INTERVAL_S = 0.005
MIN_PROBES = 16
DONE_NONCE = (1 << 64) - 1  # a hello with this nonce: the shard finished (no longer watched)
KEEPALIVE_S = 0.5  # a shard's hello while it runs
SILENT_S = 10.0  # no hello for this long: the shard is lost
STOP = (1 << 64) - 1  # the start field of an answer that tells the shard to stop
STOP_LINGER_S = 3.0  # how long a stopped coordinator keeps answering STOP
COORDINATOR_SILENT_S = 5.0  # no answer to the keep-alives for this long: stop


class ShardStopped(RuntimeError):
    """The coordinator abandoned this shard's trial attempt (or is gone): stop sending."""


class StopSignal:
    """Set once, with the reason, when a shard must stop (``keep_alive``)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.reason = ""

    def set(self, reason: str) -> None:
        if not self.event.is_set():
            self.reason = reason
            self.event.set()


@dataclass(slots=True)
class Offset:
    """The offset of a shard's monotonic clock to the coordinator's (coordinator − shard)."""

    offset_ns: int
    uncertainty_ns: int
    probes: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "offset_ns": self.offset_ns,
            "uncertainty_ns": self.uncertainty_ns,
            "probes": self.probes,
        }


class SyncServer:
    """The coordinator's clock and start instant, answered over UDP by a thread."""

    def __init__(self, shards: int, host: str = "127.0.0.1", port: int = 0) -> None:
        self.shards = shards
        self.token = secrets.token_bytes(16)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind((host, port))
        self._sock.settimeout(0.2)
        self.address: tuple[str, int] = self._sock.getsockname()
        self._ready: set[int] = set()
        self._seen: dict[int, float] = {}  # shard -> time.monotonic() of its last packet
        self._done: set[int] = set()
        self._all_ready = threading.Event()
        self._start_ns = 0
        self._stopping_until: float | None = None  # time.monotonic(); answers are STOP
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="clock-sync", daemon=True)

    def start(self) -> SyncServer:
        self._thread.start()
        return self

    @property
    def ready(self) -> set[int]:
        return set(self._ready)

    def wait_ready(self, timeout_s: float) -> bool:
        """Whether every shard said hello within ``timeout_s``."""
        return self._all_ready.wait(timeout_s)

    def silent(self, after_s: float) -> list[int]:
        """Shards that said hello once but no packet for ``after_s`` (their keep-alive
        stopped: the process or its host is gone)."""
        now = time.monotonic()
        return sorted(s for s, t in self._seen.items() if now - t > after_s and s not in self._done)

    def set_start(self, start_ns: int) -> None:
        self._start_ns = start_ns

    def stop_shards(self, linger_s: float = STOP_LINGER_S) -> None:
        """Answer every hello with STOP from now on (the trial attempt is abandoned), and
        close the socket ``linger_s`` later from the serving thread, without waiting."""
        self._start_ns = STOP
        self._stopping_until = time.monotonic() + linger_s

    def _serve(self) -> None:
        while not self._stop.is_set():
            if self._stopping_until is not None and time.monotonic() > self._stopping_until:
                self._sock.close()
                return
            try:
                data, peer = self._sock.recvfrom(64)
            except TimeoutError:
                continue
            except OSError:
                return
            now = time.perf_counter_ns()
            if len(data) != _HELLO.size:
                continue
            token, shard, nonce = _HELLO.unpack(data)
            if token != self.token or shard >= self.shards:
                continue
            if nonce == DONE_NONCE:
                self._done.add(shard)
                continue
            self._seen[shard] = time.monotonic()
            try:
                self._sock.sendto(_ANSWER.pack(nonce, now, self._start_ns), peer)
            except OSError:
                continue
            if shard not in self._ready:
                self._ready.add(shard)
                if len(self._ready) == self.shards:
                    self._all_ready.set()

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        if self._thread.is_alive():
            self._thread.join(timeout=1)


class _Client(asyncio.DatagramProtocol):
    def __init__(self, stopped: StopSignal | None = None) -> None:
        self.answers: dict[int, tuple[int, int, int]] = {}  # nonce -> (tc, start, t1)
        self.arrived = asyncio.Event()
        self.stopped = stopped

    def datagram_received(self, data: bytes, addr: Any) -> None:
        t1 = time.perf_counter_ns()
        if len(data) == _ANSWER.size:
            nonce, tc, start = _ANSWER.unpack(data)
            self.answers[nonce] = (tc, start, t1)
            self.arrived.set()
            if start == STOP and self.stopped is not None:  # at once, not at the next beat
                self.stopped.set("the coordinator abandoned this trial attempt (STOP)")


def boot_id() -> str | None:
    """The kernel's boot id: processes with the same one share CLOCK_MONOTONIC exactly."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def same_kernel(other_boot_id: str | None) -> bool:
    """Whether a process that reported ``other_boot_id`` runs on this kernel: its clock
    is this one's, offset exactly 0 (a measured offset would only add its estimate's error)."""
    return other_boot_id is not None and other_boot_id == boot_id()


async def measure(
    address: tuple[str, int],
    token: bytes,
    shard: int,
    *,
    wait_for_start: bool,
    timeout_s: float = 120.0,
    min_probes: int = MIN_PROBES,
) -> tuple[Offset, int]:
    """Probe the coordinator until ``min_probes`` answers (and, with ``wait_for_start``, a
    start instant) arrived; returns the tightest offset and the start (coordinator ns, 0
    when not waited for)."""
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_datagram_endpoint(_Client, remote_addr=address)
    sent: dict[int, int] = {}
    best: tuple[int, int] | None = None  # (rtt, offset)
    start = 0
    deadline = time.monotonic() + timeout_s
    nonce = 0
    try:
        while True:
            nonce += 1
            t0 = time.perf_counter_ns()
            sent[nonce] = t0
            transport.sendto(_HELLO.pack(token, shard, nonce))
            await asyncio.sleep(PROBE_INTERVAL_S)
            for n, (tc, s, t1) in list(proto.answers.items()):
                t0n = sent.pop(n, None)
                del proto.answers[n]
                if t0n is None:
                    continue
                rtt = t1 - t0n
                offset = tc - (t0n + t1) // 2
                if best is None or rtt < best[0]:
                    best = (rtt, offset)
                if s == STOP:
                    raise ShardStopped("the coordinator abandoned this trial attempt (STOP)")
                if s:
                    start = s
            answered = nonce - len(sent)
            if answered >= min_probes and (start or not wait_for_start):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no start from the coordinator at {address[0]}:{address[1]} "
                    f"within {timeout_s:g} s ({answered} answers)"
                )
    finally:
        transport.close()
    assert best is not None
    rtt, offset = best
    return Offset(offset, (rtt + 1) // 2, nonce - len(sent)), start


async def keep_alive(
    address: tuple[str, int],
    token: bytes,
    shard: int,
    finished: asyncio.Event,
    interval_s: float = KEEPALIVE_S,
    stopped: StopSignal | None = None,
) -> None:
    """Say hello every ``interval_s`` until cancelled (the coordinator's liveness check);
    cancelled once ``finished`` is set, say "done" (a failed shard just falls silent).
    ``stopped`` is set when the coordinator answers STOP, or answers nothing for
    ``COORDINATOR_SILENT_S``."""
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_datagram_endpoint(
        lambda: _Client(stopped), remote_addr=address
    )
    try:
        nonce = 1 << 62
        heard = time.monotonic()
        while True:
            nonce += 1
            transport.sendto(_HELLO.pack(token, shard, nonce))
            await asyncio.sleep(interval_s)
            if proto.answers:  # a STOP among them has set `stopped` on arrival
                heard = time.monotonic()
                proto.answers.clear()
            elif stopped is not None and time.monotonic() - heard > COORDINATOR_SILENT_S:
                stopped.set(f"the coordinator answered nothing for {COORDINATOR_SILENT_S:g} s")
    except asyncio.CancelledError:
        if finished.is_set():
            for _ in range(3):  # UDP may drop one
                transport.sendto(_HELLO.pack(token, shard, DONE_NONCE))
        raise
    finally:
        transport.close()
