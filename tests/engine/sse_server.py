"""A tiny scriptable HTTP/1.1 server on loopback for the engine's client tests.

Each request is answered by a ``Script``: a list of steps, each ``bytes`` to write (then
drain) or a float to sleep, or ``CLOSE`` to drop the connection. Helpers render
OpenAI-style SSE events and chunked framing, so tests can build exact byte streams,
including splits in the middle of an event or of a chunk-size line.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

CLOSE = object()
Step = bytes | float | object
Responder = Callable[[dict[str, Any]], list[Step]]


def sse(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def chat_delta(text: str = "", *, reasoning: str = "", tool: str = "", role: str = "") -> bytes:
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = role
    if text:
        delta["content"] = text
    if reasoning:
        delta["reasoning_content"] = reasoning
    if tool:
        delta["tool_calls"] = [{"index": 0, "function": {"arguments": tool}}]
    return sse({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})


def usage_event(prompt: int, completion: int, cached: int | None = None) -> bytes:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return sse({"choices": [], "usage": usage})


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


LAST_CHUNK = b"0\r\n\r\n"


def head(status: int = 200, *, chunked: bool = True, length: int | None = None, **kw: str) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 500: "Internal Server Error"}.get(status, "X")
    lines = [f"HTTP/1.1 {status} {reason}"]
    lines.append(f"Content-Type: {kw.pop('content_type', 'text/event-stream')}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    if length is not None:
        lines.append(f"Content-Length: {length}")
    for name, value in kw.items():
        lines.append(f"{name.replace('_', '-')}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chat_stream(n_tokens: int, *, prompt: int = 10, cached: int | None = 0) -> list[bytes]:
    """The SSE events of a normal chat completion of ``n_tokens`` one-token deltas."""
    events = [chat_delta(role="assistant")]
    events += [chat_delta(f"t{i} ") for i in range(n_tokens)]
    events.append(
        sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
    )
    events.append(usage_event(prompt, n_tokens, cached))
    events.append(sse(b"[DONE]"))
    return events


def chunked_response(events: list[bytes], *, gap_s: float = 0.0) -> list[Step]:
    steps: list[Step] = [head()]
    for event in events:
        steps.append(chunk(event))
        if gap_s:
            steps.append(gap_s)
    steps.append(LAST_CHUNK)
    return steps


@dataclass
class ScriptServer:
    responder: Responder
    requests: list[dict[str, Any]] = field(default_factory=list)
    connections: int = 0
    server: asyncio.Server | None = None
    port: int = 0
    writers: set[asyncio.StreamWriter] = field(default_factory=set)
    handlers: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{self.port}/v1"

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for writer in list(self.writers):
                writer.close()
            for task in list(self.handlers):
                task.cancel()
            await asyncio.gather(*self.handlers, return_exceptions=True)
            await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.add(writer)
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            while True:
                try:
                    head_bytes = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head_bytes.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = {
                    "method": method,
                    "path": path,
                    "headers": headers,
                    "body": json.loads(body) if body else None,
                    "raw_size": len(body),
                    "connection": self.connections,
                }
                self.requests.append(request)
                for step in self.responder(request):
                    if step is CLOSE:
                        writer.close()
                        return
                    if isinstance(step, float):
                        await asyncio.sleep(step)
                    else:
                        assert isinstance(step, bytes)
                        writer.write(step)
                        await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self.writers.discard(writer)
            self.handlers.discard(task)
            if not writer.is_closing():
                writer.close()
