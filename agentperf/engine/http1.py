"""HTTP/1.1 on a bare asyncio ``BufferedProtocol``: one keep-alive connection that collects
one response at a time (`Connection`), and the incremental chunked-transfer decoder
(`Dechunker`). `agentperf.engine.client.HttpTransport` drives them; why the read path is built
this way is in its docstring and docs/engine.md "HTTP client design"."""

from __future__ import annotations

import asyncio
import time
from typing import cast

from agentperf.engine.transport import ERROR_PROTOCOL

COMPACT_BYTES = 32 * 1024  # a streaming response's reads are parsed early beyond this
_CHUNKED_END = b"\r\n0\r\n\r\n"
_perf_ns = time.perf_counter_ns


class ClientError(Exception):
    """A request that failed; carries its error class (one of transport.ERROR_CLASSES)."""

    def __init__(self, error_class: str, detail: str) -> None:
        super().__init__(detail)
        self.error_class = error_class
        self.detail = detail


class Connection(asyncio.BufferedProtocol):
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


class Dechunker:
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
