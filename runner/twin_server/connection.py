"""One client connection of the twin's real-time server: sequential HTTP/1.1 requests with
keep-alive, read off the socket by hand (no framework: the emission timing is the point,
docs/simulator.md "Entry points"), each handed whole to the server's ``handle``.

Refused here, before the server sees them: a head over 64 KiB (431), a malformed request
line (400), a chunked request body (411), a body over 64 MiB (413).
"""

from __future__ import annotations

import asyncio
import json
from typing import Protocol, cast

from agentperf.simulator.scheduler import SimRequest

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
REASONS.update({411: "Length Required", 413: "Payload Too Large", 431: "Headers Too Large"})


def error_body(status: int, message: str) -> bytes:
    """An error body as vLLM's OpenAI server writes it."""
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "InternalServerError")
    return json.dumps(
        {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    ).encode()


class RequestHandler(Protocol):
    """What a connection hands its requests to (``server.SimServer``)."""

    def handle(
        self, conn: Connection, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> None: ...

    def on_disconnect(self, req: SimRequest) -> None: ...


class Connection(asyncio.Protocol):
    """One client connection: sequential HTTP/1.1 requests with keep-alive."""

    def __init__(self, server: RequestHandler) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False
        self.closed = False
        self.current: SimRequest | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (asyncio's or uvloop's, which has the same API unsubclassed)
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.current is not None:
            self.server.on_disconnect(self.current)
            self.current = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._process()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def respond(
        self, status: int, body: bytes, ctype: str = "application/json", *, done: bool = True
    ) -> None:
        head = (
            f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
        ).encode()
        self.write(head + body)
        if done:
            self.finish_request()

    def finish_request(self) -> None:
        self.busy = False
        self.current = None
        if self.buf and not self.closed:
            self._process()

    def _process(self) -> None:
        while not self.busy and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD:
                    self._fatal(431)
                return
            head = bytes(self.buf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3:
                self._fatal(400)
                return
            method, target = parts[0], parts[1]
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._fatal(411)
                return
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                self._fatal(400)
                return
            if length > MAX_BODY:
                self._fatal(413)
                return
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            self.busy = True
            self.server.handle(self, method, target, headers, body)

    def _fatal(self, status: int) -> None:
        self.respond(status, error_body(status, REASONS.get(status, "error")), done=False)
        if self.transport is not None:
            self.transport.close()
        self.closed = True
