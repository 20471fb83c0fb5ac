"""The OpenAI-compatible answer parser: server-sent events (or a plain JSON body, from a
server that ignored ``stream=true``) into a `ParseState`: text, reasoning, tool-call text,
usage, finish reason, first and last output-event times, errors.

It is fed body bytes read by read, each with its read's arrival time (`feed_sse`), batches
the events' JSON payloads and decodes a batch with one ``orjson.loads`` (`flush`); the
event time is the arrival time of the read that completed the event. No I/O: the HTTP
client (agentperf/engine/client.py) feeds it de-chunked bytes, a test feeds it any split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

BODY_EXCERPT_CHARS = 500
# An error body longer than this is not parsed for its message (its excerpt is kept).
ERROR_BODY_PARSE_BYTES = 64 * 1024


def server_error_message(body: bytes) -> str:
    """The server's own reason in an error body, on one line and at most BODY_EXCERPT_CHARS
    characters (docs/engine.md "Error reasons"): ``error.message`` of an OpenAI-style body
    (vLLM, llama.cpp, SGLang: ``{"error": {"message": ...}}``), an ``error`` string, a
    top-level ``message`` (older vLLM) or ``detail`` (FastAPI); else the body's start."""
    if len(body) <= ERROR_BODY_PARSE_BYTES and body.lstrip()[:1] == b"{":
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            return error_text(obj)
    return _one_line(body[: BODY_EXCERPT_CHARS * 4].decode("utf-8", "replace"))


def error_text(obj: dict[str, Any]) -> str:
    """The reason in a decoded error object (a body or an event), as server_error_message."""
    message: Any = None
    error = obj.get("error")
    if isinstance(error, dict):
        message = error.get("message")
    elif isinstance(error, str):
        message = error
    else:
        message = next((obj[k] for k in ("message", "detail") if isinstance(obj.get(k), str)), None)
    if not isinstance(message, str) or not message.strip():
        message = orjson.dumps(error if isinstance(error, dict) else obj).decode("utf-8", "replace")
    return _one_line(message)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:BODY_EXCERPT_CHARS]


@dataclass(slots=True)
class ParseState:
    """What the events of one answer said so far (`feed_sse`, `flush`)."""

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


def _event_payload(state: ParseState, raw: bytes) -> bytes | None:
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
        state.error = f"error event: {server_error_message(data)}"
        return None
    return data


def _handle_object(state: ParseState, t_ns: int, obj: Any) -> None:
    if not isinstance(obj, dict):
        state.error = f"unexpected SSE payload: {str(obj)[:120]!r}"
        return
    if "error" in obj:
        state.error = f"error event: {error_text(obj)}"
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


def flush(state: ParseState) -> None:
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


def handle_event(state: ParseState, t_ns: int, raw: bytes) -> None:
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


def feed_sse(state: ParseState, t_ns: int, body: bytes) -> int:
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


def finalize_json_body(state: ParseState, t_ns: int, body: bytes) -> None:
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
        state.error = f"error body: {error_text(obj)}"
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
