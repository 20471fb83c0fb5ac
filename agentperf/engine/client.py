"""HttpTransport: a streaming OpenAI-compatible client built for measuring, not for convenience.

Why it is written on a bare asyncio ``Protocol`` instead of aiohttp/httpx:

- the read path does one thing per network read: copy the bytes out of one shared 256 KB
  read buffer and take one ``time.perf_counter_ns()`` timestamp (plus a 7-byte tail check
  to notice the end of a chunked body). No line splitting, no JSON, no per-event allocation
  while streams are live. The connection is a ``BufferedProtocol`` because the stock asyncio
  loop's ``recv(256 KB)`` mmaps a fresh 256 KB block for every read and munmaps it when the
  response is freed (~40 µs per read; 300 munmaps, ~5 ms, when a connection is reused), which
  stamped the first tokens of a burst of cached requests hundreds of milliseconds late;
- the request is encoded once (orjson) and written with one ``transport.write``: a 500 KB
  (131k-token) body costs well under a millisecond instead of the ~6 ms generic clients spend;
- after the stream closes the response is parsed in small slices (``PARSE_SLICE_EVENTS``
  events, then ``await asyncio.sleep(0)``), so a finished 2k-token answer never blocks the
  event loop long enough to delay another stream's first-token timestamp;
- a long answer is not held whole: once a streaming response holds ``COMPACT_BYTES`` of
  reads, the reads so far (all but the last) are parsed the same way and dropped, so a
  shard with thousands of agents holds about that much per stream, not every stream's
  whole answer (docs/benchmarks.md "Sharded trials").

Event times are the arrival time of the network read that completed the event, so
``t_first``/``t_last`` are exact to the read, whatever the parsing cost.

The connection and the chunked decoding are agentperf/engine/http1.py, the event parser
agentperf/engine/sse.py; this module is the transport that drives them.
"""

from __future__ import annotations

import asyncio
import socket
import ssl as ssl_module
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import orjson

from agentperf.engine.http1 import ClientError, Connection, Dechunker
from agentperf.engine.sse import (
    ParseState,
    feed_sse,
    finalize_json_body,
    flush,
    handle_event,
    server_error_message,
)
from agentperf.engine.transport import (
    ERROR_CONNECT,
    ERROR_DISCONNECT,
    ERROR_HTTP_STATUS,
    ERROR_PROTOCOL,
    ERROR_TIMEOUT,
    ERROR_WRONG_LENGTH,
    Exchange,
    RequestSpec,
)

__all__ = ["ClientError", "HttpTransport", "encode_body", "endpoint_path"]

PARSE_SLICE_EVENTS = 16  # events parsed between two yields (docs/benchmarks.md: 64 doubled p99)
READ_BUFFER_BYTES = 256 * 1024  # one read can take this much (a 131k-token answer streams fast)


class _StreamParse:
    """An SSE body parsed read by read, in slices of PARSE_SLICE_EVENTS events with a yield
    to the loop between them; fed early (a long stream, COMPACT_BYTES) and at the end."""

    __slots__ = ("state", "dechunker", "budget")

    def __init__(self, api: str, chunked: bool) -> None:
        self.state = ParseState(api=api)
        self.dechunker = Dechunker() if chunked else None
        self.budget = PARSE_SLICE_EVENTS

    async def feed(self, parts: list[tuple[int, bytes]]) -> None:
        state, dechunker = self.state, self.dechunker
        for t_ns, data in parts:
            body = dechunker.feed(data) if dechunker is not None else data
            if body:
                self.budget -= feed_sse(state, t_ns, body)
            if self.budget <= 0:
                flush(state)
                self.budget = PARSE_SLICE_EVENTS
                await asyncio.sleep(0)


# --------------------------------------------------------------------------- transport


def encode_body(body: dict[str, Any]) -> bytes:
    """The request body as JSON bytes, in one pass (orjson: ~0.4 ms for 500 KB)."""
    return orjson.dumps(body)


def endpoint_path(base_path: str, api: str) -> str:
    """``/v1/chat/completions`` or ``/v1/completions`` under the base URL's path.

    A base URL without a path (``http://host:8000``) gets ``/v1``, so both the bare server
    address and the usual OpenAI ``.../v1`` base URL work.
    """
    base = base_path.rstrip("/") or "/v1"
    return f"{base}/chat/completions" if api == "chat" else f"{base}/completions"


class HttpTransport:
    """Transport over HTTP/1.1 keep-alive connections (one pool per host)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        connect_timeout_s: float = 30.0,
        extra_headers: dict[str, str] | None = None,
        check_output_length: bool = True,
        ssl_context: ssl_module.SSLContext | None = None,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
        connect: Callable[[str, int, float | None], socket.socket] | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        self._open_socket = connect
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base URL must be http(s)://host[:port][/path], got {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base_path = parts.path
        self._ssl: ssl_module.SSLContext | None = None
        if parts.scheme == "https":
            self._ssl = ssl_context or ssl_module.create_default_context()
        self.connect_timeout_s = connect_timeout_s
        self.check_output_length = check_output_length
        host_header = self.host if parts.port is None else f"{self.host}:{self.port}"
        fixed = [
            f"Host: {host_header}",
            "User-Agent: agentperf-engine",
            "Accept: text/event-stream",
            "Content-Type: application/json",
            "Connection: keep-alive",
        ]
        if api_key:
            fixed.append(f"Authorization: Bearer {api_key}")
        for name, value in (extra_headers or {}).items():
            fixed.append(f"{name}: {value}")
        self._fixed_headers = ("\r\n".join(fixed) + "\r\n").encode("latin-1")
        self._idle: list[Connection] = []
        self._all: set[Connection] = set()
        self._read_buffer = memoryview(bytearray(READ_BUFFER_BYTES))
        self._now_ns = clock_ns
        self.connections_opened = 0

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            if self._open_socket is not None:
                # A sandboxed server: the socket is made in its network namespace, then
                # connected here without blocking; no proxy in the measured path.
                sock = await asyncio.wait_for(
                    asyncio.to_thread(
                        self._open_socket, self.host, self.port, self.connect_timeout_s
                    ),
                    self.connect_timeout_s,
                )
                sock.setblocking(False)
                connecting = loop.create_connection(
                    lambda: Connection(self._read_buffer),
                    sock=sock,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl is not None else None,
                )
            else:
                connecting = loop.create_connection(
                    lambda: Connection(self._read_buffer),
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl is not None else None,
                )
            _, proto = await asyncio.wait_for(connecting, self.connect_timeout_s)
        except TimeoutError as exc:
            raise ClientError(
                ERROR_CONNECT, f"connect to {self.host}:{self.port} timed out"
            ) from exc
        except OSError as exc:
            raise ClientError(ERROR_CONNECT, f"connect to {self.host}:{self.port}: {exc}") from exc
        self.connections_opened += 1
        self._all.add(proto)
        return proto

    def _acquire_idle(self) -> Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
            self._all.discard(conn)
        return None

    def _release(self, conn: Connection, reusable: bool) -> None:
        if reusable and not conn.closed and conn.keep_alive:
            conn.waiter = None
            self._idle.append(conn)
        else:
            self._drop(conn)

    def _drop(self, conn: Connection) -> None:
        self._all.discard(conn)
        if conn.transport is not None and not conn.closed:
            conn.transport.close()

    def _request_bytes(self, spec: RequestSpec) -> bytes:
        """The request's bytes: headers and the orjson body in one buffer (one write)."""
        payload = encode_body(spec.body)
        path = endpoint_path(self.base_path, spec.api)
        # X-Request-Id names the request to the server (vLLM uses it as its request id; the
        # simulator's ground truth and the loopback stub key their logs by it).
        rid = spec.request_id
        named = f"X-Request-Id: {rid}\r\n" if rid and rid.isprintable() else ""
        head = (
            f"POST {path} HTTP/1.1\r\nContent-Length: {len(payload)}\r\n{named}".encode(
                "latin-1", "replace"
            )
            + self._fixed_headers
            + b"\r\n"
        )
        return head + payload

    async def send(self, spec: RequestSpec) -> Exchange:
        # The bytes are built right before each write and not kept while the answer streams
        # (a retry on a stale pooled connection builds them again): with thousands of agents
        # in one shard, holding every in-flight request's ~100 KB-1 MB body was most of the
        # process's memory (docs/benchmarks.md "Sharded trials").
        exchange = Exchange(request_id=spec.request_id, t_send_ns=self._now_ns())
        try:
            await asyncio.wait_for(self._roundtrip(spec, exchange), spec.timeout_s)
        except ClientError as exc:
            exchange.error_class = exc.error_class
            exchange.error_detail = exc.detail
        except TimeoutError:
            exchange.error_class = ERROR_TIMEOUT
            exchange.error_detail = f"no complete response within {spec.timeout_s:g} s"
        if exchange.t_end_ns is None:
            exchange.t_end_ns = self._now_ns()
        if (
            exchange.error_class is None
            and self.check_output_length
            and spec.target_output_tokens > 0  # 0: free-length text (stop sequences, EOS)
            and exchange.completion_tokens != spec.target_output_tokens
        ):
            exchange.error_class = ERROR_WRONG_LENGTH
            exchange.error_detail = (
                f"completion_tokens={exchange.completion_tokens} target={spec.target_output_tokens}"
            )
        return exchange

    async def _roundtrip(self, spec: RequestSpec, exchange: Exchange) -> None:
        loop = asyncio.get_running_loop()
        conn = self._acquire_idle()
        reused = conn is not None
        if conn is None:
            conn = await self._connect()
        finished = False
        try:
            for attempt in (0, 1):
                waiter: asyncio.Future[None] = loop.create_future()
                conn.start(waiter)
                request = self._request_bytes(spec)
                exchange.t_send_ns = self._now_ns()  # after encoding, before the write
                assert conn.transport is not None
                conn.transport.write(request)
                del request
                early = await self._await_response(conn, waiter, spec)
                if conn.reads or not reused or attempt == 1:
                    break
                # A pooled connection the server had already closed: nothing was received,
                # so nothing was processed; retry once on a fresh connection.
                self._drop(conn)
                conn = await self._connect()
                reused = False
            complete = conn.complete()
            exchange.n_reads = len(conn.reads) + conn.n_compacted
            parts = conn.body_parts()
            conn.reads, conn.times = [], []  # the parse owns them now; an idle conn holds none
            status, headers, chunked = conn.status, conn.headers, conn.chunked
            # Hand the connection back before parsing: parsing is deferred work.
            finished = True
            self._release(conn, reusable=complete)
        finally:
            if not finished:
                self._drop(conn)
        exchange.t_end_ns = parts[-1][0] if parts else self._now_ns()
        exchange.http_status = status or None
        if not parts and not complete:
            raise ClientError(
                ERROR_DISCONNECT, f"connection closed before a response ({conn.close_reason})"
            )
        if conn.header_end < 0 and conn.closed:
            raise ClientError(
                ERROR_DISCONNECT,
                f"connection closed inside the response head ({conn.close_reason})",
            )
        if status == -1 or conn.header_end < 0:
            raise ClientError(ERROR_PROTOCOL, "malformed HTTP response head")
        await self._parse(spec, exchange, parts, status, headers, chunked, complete, conn, early)

    async def _await_response(
        self, conn: Connection, waiter: asyncio.Future[None], spec: RequestSpec
    ) -> _StreamParse | None:
        """Wait for the response's end; each time a streaming response holds COMPACT_BYTES,
        parse its reads so far (but the last) and drop them. Returns that early parse."""
        loop = asyncio.get_running_loop()
        early: _StreamParse | None = None
        while True:
            await waiter
            if conn.finished or conn.closed or not conn.compact_due:
                return early
            parts = conn.take_early_parts()
            if parts:
                if early is None:
                    early = _StreamParse(spec.api, conn.chunked)
                await early.feed(parts)
            waiter = loop.create_future()
            conn.waiter = waiter
            if conn.finished or conn.closed:  # it ended while the early parse ran
                return early

    async def _parse(
        self,
        spec: RequestSpec,
        exchange: Exchange,
        parts: list[tuple[int, bytes]],
        status: int,
        headers: dict[str, str],
        chunked: bool,
        complete: bool,
        conn: Connection,
        early: _StreamParse | None = None,
    ) -> None:
        dechunker = Dechunker() if chunked else None
        if status != 200:
            body = b"".join(d for _, d in parts)
            if dechunker is not None:
                try:
                    body = dechunker.feed(body)
                except ClientError:
                    pass
            # the server's own reason, parsed from its JSON error body when it sent one
            # (docs/engine.md "Error reasons")
            raise ClientError(ERROR_HTTP_STATUS, f"HTTP {status}: {server_error_message(body)}")
        content_type = headers.get("content-type", "")
        if "text/event-stream" not in content_type:
            state = ParseState(api=spec.api)
            raw = b"".join(d for _, d in parts)
            if dechunker is not None:
                raw = dechunker.feed(raw)
            finalize_json_body(state, parts[-1][0], raw)
        else:
            stream = early or _StreamParse(spec.api, chunked)
            await stream.feed(parts)
            state, dechunker = stream.state, stream.dechunker
            if state.pending.strip():
                # A final event without its blank line (some servers close right after it).
                handle_event(state, parts[-1][0], state.pending)
            flush(state)
        exchange.t_first_ns = state.t_first
        exchange.t_last_ns = state.t_last
        exchange.n_output_events = state.n_output_events
        exchange.finish_reason = state.finish_reason
        exchange.content = "".join(state.content) if state.content else ""
        exchange.reasoning = "".join(state.reasoning) if state.reasoning else ""
        exchange.tool_calls_text = "".join(state.tool_text) if state.tool_text else ""
        exchange.extra["sse_events"] = state.n_events
        if conn.n_compacted:
            exchange.extra["reads_parsed_early"] = conn.n_compacted
        if state.reasoning_field is not None:
            exchange.extra["reasoning_field"] = state.reasoning_field
        if state.logprobs is not None:
            exchange.extra["logprobs"] = state.logprobs
        if state.timings is not None:
            exchange.extra["server_timings"] = state.timings
        usage = state.usage
        if usage is not None:
            exchange.prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
            exchange.completion_tokens = _int_or_none(usage.get("completion_tokens"))
            details = usage.get("prompt_tokens_details") or {}
            exchange.cached_tokens = _int_or_none(details.get("cached_tokens"))
        if not complete or (dechunker is not None and not dechunker.done):
            raise ClientError(
                ERROR_DISCONNECT,
                f"stream cut after {state.n_output_events} output events ({conn.close_reason})",
            )
        if state.error is not None:
            raise ClientError(ERROR_PROTOCOL, state.error)
        if usage is None:
            raise ClientError(ERROR_PROTOCOL, "stream ended without a usage object")

    async def aclose(self) -> None:
        for conn in list(self._all):
            self._drop(conn)
        self._idle.clear()
        await asyncio.sleep(0)


def _int_or_none(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
