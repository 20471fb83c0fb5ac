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
"""

from __future__ import annotations

import asyncio
import socket
import ssl as ssl_module
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit

import orjson

from runner.engine.transport import (
    ERROR_CONNECT,
    ERROR_DISCONNECT,
    ERROR_HTTP_STATUS,
    ERROR_PROTOCOL,
    ERROR_TIMEOUT,
    ERROR_WRONG_LENGTH,
    Exchange,
    RequestSpec,
)

COMPACT_BYTES = 32 * 1024  # a streaming response's reads are parsed early beyond this
PARSE_SLICE_EVENTS = 16  # events parsed between two yields (docs/benchmarks.md: 64 doubled p99)
READ_BUFFER_BYTES = 256 * 1024  # one read can take this much (a 131k-token answer streams fast)
BODY_EXCERPT_CHARS = 500
_CHUNKED_END = b"\r\n0\r\n\r\n"
_perf_ns = time.perf_counter_ns


class ClientError(Exception):
    """A request that failed; carries its error class (one of transport.ERROR_CLASSES)."""

    def __init__(self, error_class: str, detail: str) -> None:
        super().__init__(detail)
        self.error_class = error_class
        self.detail = detail


# --------------------------------------------------------------------------- connection


class _Connection(asyncio.BufferedProtocol):
    """One HTTP/1.1 keep-alive connection; collects one response at a time.

    Reads land in ``buffer`` (shared by every connection of a transport: the loop fills it
    and calls ``buffer_updated`` before it reads any other socket) and are copied out as
    exact-size ``bytes``.
    """

    __slots__ = (
        "buffer",
        "transport",
        "reads",
        "times",
        "closed",
        "close_reason",
        "waiter",
        "header_end",
        "status",
        "headers",
        "chunked",
        "content_length",
        "body_received",
        "tail",
        "keep_alive",
        "requests_done",
        "held",
        "compact_due",
        "compactable",
        "finished",
        "n_compacted",
    )

    def __init__(self, buffer: memoryview) -> None:
        self.buffer = buffer
        self.transport: asyncio.Transport | None = None
        self.reads: list[bytes] = []
        self.times: list[int] = []
        self.closed = False
        self.close_reason = ""
        self.waiter: asyncio.Future[None] | None = None
        self.header_end = -1  # offset of the body inside reads[0] once headers are parsed
        self.status = 0
        self.headers: dict[str, str] = {}
        self.chunked = False
        self.content_length: int | None = None
        self.body_received = 0
        self.tail = b""
        self.keep_alive = True
        self.requests_done = 0
        self.held = 0  # bytes in reads
        self.compact_due = False  # held passed COMPACT_BYTES: the waiter woke for an early parse
        self.compactable = False  # a 200 event stream (set once its headers are parsed)
        self.finished = False
        self.n_compacted = 0  # reads parsed early and dropped

    # asyncio callbacks -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport; they have the same API.
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        # The read loop: one timestamp, one copy, one append, a constant-time end check.
        self.times.append(_perf_ns())
        data = self.buffer[:nbytes].tobytes()
        self.reads.append(data)
        self.held += nbytes
        if self.held > COMPACT_BYTES and self.compactable and not self.compact_due:
            self.compact_due = True
            waiter = self.waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        if self.header_end < 0:
            self._try_headers()
        elif self.chunked:
            tail = data[-7:] if len(data) >= 7 else (self.tail + data)[-7:]
            self.tail = tail
            if tail == _CHUNKED_END:
                self._finish()
        elif self.content_length is not None:
            self.body_received += len(data)
            if self.body_received >= self.content_length:
                self._finish()

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.close_reason = repr(exc) if exc is not None else "closed by peer"
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # helpers -----------------------------------------------------------------------
    def start(self, waiter: asyncio.Future[None]) -> None:
        self.reads = []
        self.times = []
        self.waiter = waiter
        self.header_end = -1
        self.status = 0
        self.headers = {}
        self.chunked = False
        self.content_length = None
        self.body_received = 0
        self.tail = b""
        self.held = 0
        self.compact_due = False
        self.compactable = False
        self.finished = False
        self.n_compacted = 0

    def take_early_parts(self) -> list[tuple[int, bytes]]:
        """The body reads so far but the last (which may end inside an event), dropped
        from the connection for an early parse."""
        self.compact_due = False
        if len(self.reads) < 2 or self.header_end < 0:
            return []
        parts = self.body_parts()[:-1]
        self.reads, self.times = [self.reads[-1]], [self.times[-1]]
        self.header_end = 0  # the kept read is body
        self.n_compacted += len(parts)
        self.held = len(self.reads[0])
        return parts

    def _finish(self) -> None:
        self.finished = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _try_headers(self) -> None:
        # Headers arrive in the first read or two; join only then.
        if len(self.reads) > 1:
            joined = b"".join(self.reads)
            self.reads = [joined]
            self.times = [self.times[-1]]
        head = self.reads[0]
        end = head.find(b"\r\n\r\n")
        if end < 0:
            if len(head) > 65536:
                self.close_reason = "response headers too large"
                self.keep_alive = False
                self._finish()
            return
        lines = head[:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        try:
            self.status = int(parts[1])
        except (IndexError, ValueError):
            self.status = -1
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.headers = headers
        self.header_end = end + 4
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self.compactable = self.status == 200 and "text/event-stream" in headers.get(
            "content-type", ""
        )
        connection = headers.get("connection", "").lower()
        self.keep_alive = not (connection == "close" or parts[0] == "HTTP/1.0")
        body = head[self.header_end :]
        if self.chunked:
            self.tail = body[-7:]
            if body.endswith(_CHUNKED_END) or body == b"0\r\n\r\n":
                self._finish()
        elif "content-length" in headers:
            try:
                self.content_length = int(headers["content-length"])
            except ValueError:
                self.content_length = None
                self.keep_alive = False
            self.body_received = len(body)
            if self.content_length is not None and self.body_received >= self.content_length:
                self._finish()
        else:
            self.keep_alive = False  # body ends at EOF
        if self.status in (204, 304) or 100 <= self.status < 200:
            self.content_length = 0
            self._finish()

    def complete(self) -> bool:
        """Whether the response has been read to its framing's end (not cut by EOF)."""
        if self.header_end < 0:
            return False
        if self.chunked:
            return self.tail == _CHUNKED_END or (
                len(self.reads) == 1 and self.reads[0][self.header_end :] == b"0\r\n\r\n"
            )
        if self.content_length is not None:
            return self.body_received >= self.content_length
        return self.closed  # read-to-EOF body

    def body_parts(self) -> list[tuple[int, bytes]]:
        """(arrival time, raw body bytes) per read, headers removed."""
        if not self.reads:
            return []
        parts = [(self.times[0], self.reads[0][self.header_end :])]
        parts.extend(zip(self.times[1:], self.reads[1:], strict=True))
        return parts


# --------------------------------------------------------------------------- parsing


class _Dechunker:
    """Incremental HTTP/1.1 chunked-transfer decoder (RFC 9112 §7.1), fed read by read."""

    __slots__ = ("remaining", "line", "skip_crlf", "done", "in_trailer")

    def __init__(self) -> None:
        self.remaining = 0
        self.line = b""
        self.skip_crlf = 0
        self.done = False
        self.in_trailer = False

    def feed(self, data: bytes) -> bytes:
        out: list[bytes] = []
        pos = 0
        n = len(data)
        if not (self.remaining or self.skip_crlf or self.line or self.in_trailer or self.done):
            # Fast path: whole chunks laid end to end (the usual read); stops at anything else.
            find = data.find
            while pos < n:
                idx = find(b"\r\n", pos)
                if idx < 0:
                    break
                try:
                    size = int(data[pos:idx], 16)
                except ValueError:
                    break  # chunk extensions etc.: the general loop below
                end = idx + 2 + size
                if size == 0 or end + 2 > n:
                    break
                out.append(data[idx + 2 : end])
                pos = end + 2
        while pos < n and not self.done:
            if self.remaining:
                take = min(self.remaining, n - pos)
                out.append(data[pos : pos + take])
                pos += take
                self.remaining -= take
                if not self.remaining:
                    self.skip_crlf = 2
            elif self.skip_crlf:
                take = min(self.skip_crlf, n - pos)
                pos += take
                self.skip_crlf -= take
            else:
                idx = data.find(b"\n", pos)
                if idx < 0:
                    self.line += data[pos:]
                    break
                line = (self.line + data[pos:idx]).strip() if self.line else data[pos:idx].strip()
                self.line = b""
                pos = idx + 1
                if self.in_trailer:
                    if not line:
                        self.done = True
                    continue
                try:
                    size = int(line.split(b";", 1)[0], 16)
                except ValueError as exc:
                    raise ClientError(ERROR_PROTOCOL, f"bad chunk size line {line[:40]!r}") from exc
                if size == 0:
                    self.in_trailer = True
                elif pos + size + 2 <= n:
                    # Fast path: the whole chunk and its CRLF are in this read.
                    out.append(data[pos : pos + size])
                    pos += size + 2
                else:
                    self.remaining = size
        return b"".join(out) if len(out) != 1 else out[0]


@dataclass(slots=True)
class _ParseState:
    api: str
    t_first: int | None = None
    t_last: int | None = None
    n_output_events: int = 0
    n_events: int = 0
    content: list[str] | None = None
    reasoning: list[str] | None = None
    reasoning_field: str | None = None  # "reasoning_content" or "reasoning", as the server sent
    logprobs: list[Any] | None = None  # choices' logprobs objects, only when requested
    tool_text: list[str] | None = None
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    done_marker: bool = False
    error: str | None = None
    timings: dict[str, Any] | None = None
    pending: bytes = b""
    batch: list[bytes] = field(default_factory=list)  # payloads awaiting one JSON decode
    batch_times: list[int] = field(default_factory=list)


def _event_payload(state: _ParseState, raw: bytes) -> bytes | None:
    """The data of one SSE event (None for comments/empty events); notes error events."""
    if raw.startswith(b"data: ") and b"\n" not in raw:
        return raw[6:]  # the common single-line event
    data_lines: list[bytes] = []
    event_name = b""
    for line in raw.split(b"\n"):
        if line.startswith(b"data:"):
            data_lines.append(line[6:] if line[5:6] == b" " else line[5:])
        elif line.startswith(b"event:"):
            event_name = line[6:].strip()
    if not data_lines:
        return None
    data = b"\n".join(data_lines)
    if event_name == b"error":
        state.error = f"error event: {data[:BODY_EXCERPT_CHARS].decode('utf-8', 'replace')}"
        return None
    return data


def _handle_object(state: _ParseState, t_ns: int, obj: Any) -> None:
    if not isinstance(obj, dict):
        state.error = f"unexpected SSE payload: {str(obj)[:120]!r}"
        return
    if "error" in obj:
        err = orjson.dumps(obj["error"])[:BODY_EXCERPT_CHARS].decode("utf-8", "replace")
        state.error = f"error event: {err}"
        return
    usage = obj.get("usage")
    if usage:
        state.usage = usage
        timings = obj.get("timings")
        if timings:
            state.timings = timings
    elif "timings" in obj and obj["timings"]:
        state.timings = obj["timings"]
    choices = obj.get("choices")
    if not choices:
        return
    visible = False
    for choice in choices:
        if state.api == "chat":
            delta = choice.get("delta") or choice.get("message")
            if delta:
                text = delta.get("content")
                if text:
                    if state.content is None:
                        state.content = []
                    state.content.append(text)
                    visible = True
                text = delta.get("reasoning_content") or delta.get("reasoning")
                if text:
                    if state.reasoning is None:
                        state.reasoning = []
                        state.reasoning_field = (
                            "reasoning_content" if delta.get("reasoning_content") else "reasoning"
                        )
                    state.reasoning.append(text)
                    visible = True
                calls = delta.get("tool_calls")
                if calls:
                    if state.tool_text is None:
                        state.tool_text = []
                    for call in calls:
                        fn = call.get("function") or {}
                        piece = (fn.get("name") or "") + (fn.get("arguments") or "")
                        if piece:
                            state.tool_text.append(piece)
                            visible = True
        else:
            text = choice.get("text")
            if text:
                if state.content is None:
                    state.content = []
                state.content.append(text)
                visible = True
        reason = choice.get("finish_reason")
        if reason:
            state.finish_reason = reason
        logprobs = choice.get("logprobs")
        if logprobs:
            if state.logprobs is None:
                state.logprobs = []
            state.logprobs.append(logprobs)
    if visible:
        state.n_output_events += 1
        if state.t_first is None:
            state.t_first = t_ns
        state.t_last = t_ns


def _flush(state: _ParseState) -> None:
    """Decode every batched payload with one orjson call, then apply them in order."""
    payloads, times = state.batch, state.batch_times
    if not payloads:
        return
    state.batch, state.batch_times = [], []
    objs: list[Any]
    try:
        objs = orjson.loads(b"[" + b",".join(payloads) + b"]")
    except orjson.JSONDecodeError:
        objs = []
        for data in payloads:
            try:
                objs.append(orjson.loads(data))
            except orjson.JSONDecodeError:
                state.error = f"unparseable SSE data: {data[:120]!r}"
                objs.append(None)
    for t_ns, obj in zip(times, objs, strict=True):
        if obj is not None:
            _handle_object(state, t_ns, obj)


def _handle_event(state: _ParseState, t_ns: int, raw: bytes) -> None:
    """One SSE event (without its blank-line terminator)."""
    raw = raw.replace(b"\r\n", b"\n")
    data = _event_payload(state, raw)
    if data is None:
        return
    state.n_events += 1
    if data == b"[DONE]":
        state.done_marker = True
        return
    state.batch.append(data)
    state.batch_times.append(t_ns)


def _feed_sse(state: _ParseState, t_ns: int, body: bytes) -> int:
    """Feed one read's body bytes; returns the number of complete events handled."""
    if state.pending:
        body = state.pending + body
    if b"\r" in body:
        body = body.replace(b"\r\n", b"\n")  # CRLF servers; a split CR waits in pending
    events = body.split(b"\n\n")
    state.pending = events.pop()
    if not events:
        return 0
    batch, times = state.batch, state.batch_times
    for raw in events:
        if raw[:6] == b"data: " and b"\n" not in raw:
            data = raw[6:]  # the common single-line event, inline
        else:
            maybe = _event_payload(state, raw)
            if maybe is None:
                continue
            data = maybe
        state.n_events += 1
        if data == b"[DONE]":
            state.done_marker = True
        else:
            batch.append(data)
            times.append(t_ns)
    return len(events)


def _finalize_json_body(state: _ParseState, t_ns: int, body: bytes) -> None:
    """A non-streamed JSON answer (a server that ignored stream=true)."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        state.error = f"unparseable response body: {body[:120]!r}"
        return
    if not isinstance(obj, dict):
        state.error = "response body is not a JSON object"
        return
    if "error" in obj:
        state.error = f"error body: {orjson.dumps(obj['error'])[:BODY_EXCERPT_CHARS].decode()}"
        return
    state.usage = obj.get("usage") or None
    if obj.get("timings"):
        state.timings = obj["timings"]
    for choice in obj.get("choices") or []:
        text = (
            (choice.get("message") or {}).get("content")
            if state.api == "chat"
            else choice.get("text")
        )
        if text:
            state.content = [text]
            state.n_output_events = 1
            state.t_first = state.t_last = t_ns
        if choice.get("finish_reason"):
            state.finish_reason = choice["finish_reason"]


class _StreamParse:
    """An SSE body parsed read by read, in slices of PARSE_SLICE_EVENTS events with a yield
    to the loop between them; fed early (a long stream, COMPACT_BYTES) and at the end."""

    __slots__ = ("state", "dechunker", "budget")

    def __init__(self, api: str, chunked: bool) -> None:
        self.state = _ParseState(api=api)
        self.dechunker = _Dechunker() if chunked else None
        self.budget = PARSE_SLICE_EVENTS

    async def feed(self, parts: list[tuple[int, bytes]]) -> None:
        state, dechunker = self.state, self.dechunker
        for t_ns, data in parts:
            body = dechunker.feed(data) if dechunker is not None else data
            if body:
                self.budget -= _feed_sse(state, t_ns, body)
            if self.budget <= 0:
                _flush(state)
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
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        self._read_buffer = memoryview(bytearray(READ_BUFFER_BYTES))
        self._now_ns = clock_ns
        self.connections_opened = 0

    async def _connect(self) -> _Connection:
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
                    lambda: _Connection(self._read_buffer),
                    sock=sock,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl is not None else None,
                )
            else:
                connecting = loop.create_connection(
                    lambda: _Connection(self._read_buffer),
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

    def _acquire_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
            self._all.discard(conn)
        return None

    def _release(self, conn: _Connection, reusable: bool) -> None:
        if reusable and not conn.closed and conn.keep_alive:
            conn.waiter = None
            self._idle.append(conn)
        else:
            self._drop(conn)

    def _drop(self, conn: _Connection) -> None:
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
        self, conn: _Connection, waiter: asyncio.Future[None], spec: RequestSpec
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
        conn: _Connection,
        early: _StreamParse | None = None,
    ) -> None:
        dechunker = _Dechunker() if chunked else None
        if status != 200:
            body = b"".join(d for _, d in parts)
            if dechunker is not None:
                try:
                    body = dechunker.feed(body)
                except ClientError:
                    pass
            excerpt = body[:BODY_EXCERPT_CHARS].decode("utf-8", "replace")
            raise ClientError(ERROR_HTTP_STATUS, f"HTTP {status}: {excerpt}")
        content_type = headers.get("content-type", "")
        if "text/event-stream" not in content_type:
            state = _ParseState(api=spec.api)
            raw = b"".join(d for _, d in parts)
            if dechunker is not None:
                raw = dechunker.feed(raw)
            _finalize_json_body(state, parts[-1][0], raw)
        else:
            stream = early or _StreamParse(spec.api, chunked)
            await stream.feed(parts)
            state, dechunker = stream.state, stream.dechunker
            if state.pending.strip():
                # A final event without its blank line (some servers close right after it).
                _handle_event(state, parts[-1][0], state.pending)
            _flush(state)
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
