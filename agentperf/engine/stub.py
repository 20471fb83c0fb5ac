"""A loopback streaming stub: the fastest server the load generator can be measured against.

Used by ``python -m agentperf.engine calibrate-client`` (a shard's events-per-core-second
ceiling, docs/engine.md "Sharded trials") and by ``benchmarks/loadgen.py``. Raw asyncio
(uvloop), HTTP/1.1 keep-alive, pre-rendered OpenAI-style chat chunks in chunked encoding.
Each request streams ``max_tokens`` content events, ``pack`` per write, ``interval_s``
apart, after ``ttft_s``; the body's ``x_pack``/``x_interval_s``/``x_ttft_s`` override the
server's defaults. The stub records, on CLOCK_MONOTONIC (``perf_counter_ns``, shared by
every process of the host), when it received each request and when it wrote its first
content event, keyed by the body's ``x_id`` or the ``X-Request-Id`` header; ``POST
/stats`` returns and clears them, so a client's first-token stamps can be compared with
the server's writes (the TTFT error).
"""

from __future__ import annotations

import asyncio
import os
import random
from dataclasses import dataclass
from time import perf_counter_ns as time_ns
from typing import Any

import orjson

EVENT = (
    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,'
    b'"model":"bench","choices":[{"index":0,"delta":{"content":"tok"},'
    b'"logprobs":null,"finish_reason":null}]}\n\n'
)


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


CHUNK = _chunk(EVENT)
HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
)


def _tail(n: int, prompt_tokens: int = 10) -> bytes:
    usage = {"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n}}
    return (
        _chunk(b"data: " + orjson.dumps(usage) + b"\n\n")
        + _chunk(b"data: [DONE]\n\n")
        + b"0\r\n\r\n"
    )


@dataclass(slots=True)
class StubConfig:
    """Pacing of every stream unless the request's body overrides it."""

    pack: int = 1
    interval_s: float = 0.0
    ttft_s: tuple[float, float] | None = None  # uniform in [lo, hi]
    seed: int = 1


class StubConnection(asyncio.Protocol):
    def __init__(self, stats: dict[str, Any], config: StubConfig, rng: random.Random) -> None:
        self.stats = stats
        self.config = config
        self.rng = rng
        self.buf = b""
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            length = 0
            rid = ""
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                key = name.strip().lower()
                if key == "content-length":
                    length = int(value)
                elif key == "x-request-id":
                    rid = value.strip()
            if len(self.buf) < end + 4 + length:
                return
            t_received = time_ns()
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            path = head.split(" ", 2)[1]
            if path == "/stats":
                payload = orjson.dumps(self.stats)
                self.stats["first"] = {}
                self.stats["received"] = {}
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(payload)}\r\n\r\n".encode()
                    + payload
                )
                continue
            if not head.startswith("POST "):  # /v1/models, /props: the stub has none
                self.transport.write(
                    b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 2\r\n\r\n{}"
                )
                continue
            req = orjson.loads(body)
            asyncio.ensure_future(self.stream(req, str(req.get("x_id", rid)), t_received))

    async def stream(self, req: dict[str, Any], rid: str, t_received: int) -> None:
        cfg = self.config
        n = int(req["max_tokens"])
        pack = int(req.get("x_pack", cfg.pack))
        interval = float(req.get("x_interval_s", cfg.interval_s))
        ttft = req.get("x_ttft_s")
        if ttft is None:
            ttft = self.rng.uniform(*cfg.ttft_s) if cfg.ttft_s else 0.0
        self.stats["received"][rid] = t_received
        t = self.transport
        t.write(HEAD)
        if ttft:
            await asyncio.sleep(float(ttft))
        sent = 0
        first = True
        while sent < n:
            if t.is_closing():  # the client went away (cancelled, timed out)
                return
            k = min(pack, n - sent)
            if first:
                self.stats["first"][rid] = time_ns()
                first = False
            t.write(CHUNK * k)
            sent += k
            await asyncio.sleep(interval)
        if not t.is_closing():
            t.write(_tail(n))


def pin(cores: set[int] | int) -> None:
    """Pin this process to ``cores`` (modulo the host's count) where the OS allows it."""
    wanted = {cores} if isinstance(cores, int) else set(cores)
    try:
        count = os.cpu_count() or 1
        os.sched_setaffinity(0, {c % count for c in wanted})
    except (AttributeError, OSError):
        pass


def serve(port_queue: Any, core: int | None, config: StubConfig | None = None) -> None:
    """Run the stub forever (a process target); puts its port on ``port_queue``."""
    import uvloop

    if core is not None:
        pin(core)
    stats: dict[str, Any] = {"first": {}, "received": {}}
    cfg = config or StubConfig()
    rng = random.Random(cfg.seed)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: StubConnection(stats, cfg, rng), "127.0.0.1", 0, backlog=4096
        )
        port_queue.put(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    uvloop.run(main())
