"""The bytes the twin's real-time server answers a completion with, as vLLM's OpenAI server
writes them: streamed Server-Sent Events chunks (``chat.completion.chunk`` or
``text_completion``) in HTTP chunked framing, the final chunk with its finish reason and,
when asked (``stream_options.include_usage``), the usage chunk; or one JSON body.

A streamed chunk is its prefix, the text and its suffix: the prefix and suffix are built
once per request (``chunk_affixes``), and the text is the model's filler words, which need
no JSON escaping.
"""

from __future__ import annotations

import json
from typing import Any

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
)


def _object(api: str, *, chunk: bool) -> str:
    if api == "chat":
        return "chat.completion.chunk" if chunk else "chat.completion"
    return "text_completion"


def _id(api: str, rid: str) -> str:
    return ("chatcmpl-" if api == "chat" else "cmpl-") + rid


def chunk_affixes(api: str, rid: str, created: int, model: str) -> tuple[bytes, bytes]:
    """The bytes before and after a streamed chunk's text."""
    mj = json.dumps(model)
    if api == "chat":
        prefix = (
            f'data: {{"id":"chatcmpl-{rid}","object":"chat.completion.chunk",'
            f'"created":{created},"model":{mj},"choices":[{{"index":0,'
            f'"delta":{{"content":"'
        ).encode()
        return prefix, b'"},"logprobs":null,"finish_reason":null}]}\n\n'
    prefix = (
        f'data: {{"id":"cmpl-{rid}","object":"text_completion","created":{created},'
        f'"model":{mj},"choices":[{{"index":0,"text":"'
    ).encode()
    return prefix, b'","logprobs":null,"finish_reason":null}]}\n\n'


def role_chunk(chat_prefix: bytes) -> bytes:
    """A chat stream's first chunk: the assistant's role and empty content."""
    return (
        chat_prefix[: -len(b'"content":"')]
        + b'"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
    )


def usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def final_chunks(
    api: str, rid: str, created: int, model: str, reason: str, usage: dict[str, Any] | None
) -> bytes:
    """A stream's end: the chunk with the finish reason, the usage chunk (when ``usage``)
    and ``[DONE]``."""
    head: dict[str, Any] = {"id": _id(api, rid)}
    head.update({"object": _object(api, chunk=True), "created": created, "model": model})
    choice: dict[str, Any] = {"index": 0}
    if api == "chat":
        choice["delta"] = {}
    else:
        choice["text"] = ""
    choice.update({"logprobs": None, "finish_reason": reason})
    out = b"data: " + json.dumps({**head, "choices": [choice]}).encode() + b"\n\n"
    if usage is not None:
        out += b"data: " + json.dumps({**head, "choices": [], "usage": usage}).encode() + b"\n\n"
    return out + b"data: [DONE]\n\n"


def http_chunk(payload: bytes, *, last: bool) -> bytes:
    """``payload`` in HTTP/1.1 chunked framing (with the terminating chunk when ``last``)."""
    framed = b"%x\r\n%b\r\n" % (len(payload), payload)
    return framed + b"0\r\n\r\n" if last else framed


def completion_body(
    api: str,
    rid: str,
    created: int,
    model: str,
    text: str,
    reason: str | None,
    usage: dict[str, Any],
) -> bytes:
    """A whole (unstreamed) completion's JSON body."""
    choice: dict[str, Any]
    if api == "chat":
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": reason,
        }
    else:
        choice = {"index": 0, "text": text, "finish_reason": reason}
    body = {
        "id": _id(api, rid),
        "object": _object(api, chunk=False),
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage,
    }
    return json.dumps(body).encode()
