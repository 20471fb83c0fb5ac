"""Importer for OpenCode session exports (``opencode export <session>``).

An export is ``{"info": <session>, "messages": [{"info": <message>, "parts": [...]}]}``.
User messages carry text (and file) parts. An assistant message holds one or more model
calls ("steps"), each between a ``step-start`` and a ``step-finish`` part, with ``text``,
``reasoning`` and ``tool`` parts in between; ``step-finish`` and the message ``info`` carry
``tokens: {input, output, reasoning, cache: {read, write}}``. A tool part has ``callID``,
``tool`` and ``state: {status, input, output | error, time: {start, end}}`` (ms epoch).

Mapping: every step is one turn. Its prompt is the conversation so far as OpenAI chat
messages (user text; earlier assistant text with ``tool_calls``; ``tool`` results), the
session's recorded system prompt first when the user message carries one (OpenCode does
not export its generated system prompt or tool schemas, so those are absent).

- ``target_output_tokens``: the step's ``tokens.output`` (the message's when it has a single
  step or no step-finish), at least 1;
- ``recorded_prompt_tokens`` = input + cache.read + cache.write, ``recorded_cached_tokens``
  = cache.read (OpenCode reports input net of cached tokens);
- ``tool_delay_s``: the wall span of the step's tools, max(end) - min(start), 0 without tools;
- an assistant message with ``summary: true`` (compaction) restarts the context from its
  text, as OpenCode does.

Lossless: each export message (info and parts, verbatim) is kept in the metadata of the
turn that first sends it (``turn.metadata["opencode_messages"]``), later ones in
``trajectory.metadata["opencode_trailing"]``; ``export_session`` rebuilds the export.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentperf.engine.tokens import TokenCounter
from agentperf.engine.trajectory import (
    Dataset,
    DatasetError,
    Message,
    Trajectory,
    Turn,
    common_prefix_length,
)

_NON_TEXT = ("reasoning", "tool", "step-start", "step-finish")


def _steps(parts: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Split an assistant message's parts into model calls."""
    steps: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] | None = None
    for part in parts:
        kind = part.get("type")
        if kind == "step-start" or current is None:
            current = []
            steps.append(current)
            if kind == "step-start":
                continue
        current.append(part)
        if kind == "step-finish":
            current = None
    return [s for s in steps if s]


def _tokens_of(step: list[dict[str, Any]], info: dict[str, Any], single: bool) -> dict[str, Any]:
    for part in step:
        if part.get("type") == "step-finish" and isinstance(part.get("tokens"), dict):
            tokens: dict[str, Any] = part["tokens"]
            return tokens
    fallback = info.get("tokens")
    return fallback if single and isinstance(fallback, dict) else {}


def _user_message(parts: list[dict[str, Any]]) -> Message | None:
    texts = [p["text"] for p in parts if p.get("type") == "text" and isinstance(p.get("text"), str)]
    if not texts:
        return None
    return {"role": "user", "content": "\n".join(texts)}


def _assistant_messages(step: list[dict[str, Any]]) -> list[Message]:
    text = "".join(p.get("text", "") for p in step if p.get("type") == "text")
    calls: list[dict[str, Any]] = []
    results: list[Message] = []
    for part in step:
        if part.get("type") != "tool":
            continue
        state = part.get("state") or {}
        call_id = str(part.get("callID", part.get("id", "")))
        calls.append(
            {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": str(part.get("tool", "")),
                    "arguments": json.dumps(state.get("input", {}), ensure_ascii=False),
                },
            }
        )
        if state.get("status") == "completed":
            output = str(state.get("output", ""))
        else:
            output = str(state.get("error", f"tool {state.get('status', 'unknown')}"))
        results.append({"role": "tool", "tool_call_id": call_id, "content": output})
    message: Message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return [message, *results]


def _tool_span_s(step: list[dict[str, Any]]) -> float:
    starts: list[float] = []
    ends: list[float] = []
    for part in step:
        if part.get("type") != "tool":
            continue
        times = (part.get("state") or {}).get("time") or {}
        if isinstance(times.get("start"), int | float) and isinstance(
            times.get("end"), int | float
        ):
            starts.append(float(times["start"]))
            ends.append(float(times["end"]))
    if not starts:
        return 0.0
    return max(0.0, (max(ends) - min(starts)) / 1000.0)


def _step_turn(
    step: list[dict[str, Any]],
    minfo: dict[str, Any],
    single: bool,
    keep: int,
    new: tuple[Message, ...],
    pending: list[dict[str, Any]],
    counter: TokenCounter | None,
) -> Turn:
    """One model call as a turn: its recorded output and prompt tokens (input net of the
    cache, as OpenCode reports them), its tools' wall span, and the export messages it
    first sends."""
    tokens = _tokens_of(step, minfo, single=single)
    cache = tokens.get("cache") or {}
    prompt_tokens = None
    if "input" in tokens:
        prompt_tokens = (
            int(tokens.get("input", 0)) + int(cache.get("read", 0)) + int(cache.get("write", 0))
        )
    return Turn(
        keep_messages=keep,
        new_messages=new,
        target_output_tokens=max(1, int(tokens.get("output", 0) or 0)),
        tool_delay_s=_tool_span_s(step),
        recorded_prompt_tokens=prompt_tokens,
        recorded_cached_tokens=int(cache["read"]) if "read" in cache else None,
        message_tokens=counter.count_messages(new) if counter is not None else None,
        metadata={
            "opencode_messages": pending,
            "reasoning_tokens": int(tokens.get("reasoning", 0) or 0),
            "message_id": minfo.get("id"),
        },
    )


def _with_user(history: list[Message], minfo: dict[str, Any], parts: list[Any]) -> None:
    """A user message joins the conversation, after the session's recorded system prompt
    when it carries one and the conversation is empty."""
    system = minfo.get("system")
    if isinstance(system, str) and system and not history:
        history.append({"role": "system", "content": system})
    user = _user_message(parts)
    if user is not None:
        history.append(user)


def trajectory_from_export(
    export: dict[str, Any], *, counter: TokenCounter | None = None
) -> Trajectory:
    """One OpenCode session as a trajectory (see the module docstring)."""
    try:
        info = export["info"]
        messages = export["messages"]
    except (KeyError, TypeError) as exc:
        raise DatasetError("not an opencode export: expected {info, messages}") from exc
    history: list[Message] = []
    pending: list[dict[str, Any]] = []  # export messages not yet attached to a turn
    turns: list[Turn] = []
    previous: list[Message] = []
    model: str | None = None
    for message in messages:
        minfo = message.get("info", {})
        parts = message.get("parts", [])
        pending.append(message)
        role = minfo.get("role")
        if role == "user":
            _with_user(history, minfo, parts)
            continue
        if role != "assistant":
            continue
        model = str(minfo.get("modelID") or model or "")
        steps = _steps(parts)
        for step in steps:
            keep = common_prefix_length(previous, history)
            new = tuple(history[keep:])
            turns.append(_step_turn(step, minfo, len(steps) == 1, keep, new, pending, counter))
            pending = []
            previous = list(history)
            history.extend(_assistant_messages(step))
        if minfo.get("summary") is True:
            text = "".join(p.get("text", "") for p in parts if p.get("type") == "text")
            history = [{"role": "user", "content": text}]
    if not turns:
        raise DatasetError(f"opencode session {info.get('id')}: no assistant steps")
    return Trajectory(
        id=f"opencode/{info.get('id', 'session')}",
        turns=tuple(turns),
        tools=(),
        metadata={
            "source": "opencode-export",
            "generating_model": model,
            "repo": info.get("directory"),
            "title": info.get("title"),
            "opencode_info": info,
            "opencode_trailing": pending,
        },
    )


def export_session(trajectory: Trajectory) -> dict[str, Any]:
    """The OpenCode export an imported trajectory came from (the inverse of the import)."""
    messages: list[dict[str, Any]] = []
    for turn in trajectory.turns:
        messages.extend(turn.metadata.get("opencode_messages", []))
    messages.extend(trajectory.metadata.get("opencode_trailing", []))
    return {"info": trajectory.metadata["opencode_info"], "messages": messages}


def import_opencode(
    src: str | os.PathLike[str],
    *,
    counter: TokenCounter | None = None,
    name: str = "opencode",
    version: str = "1",
) -> Dataset:
    """One export file, or every ``*.json`` export in a folder, as a dataset."""
    path = Path(src)
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    trajectories = []
    for f in files:
        try:
            export = json.loads(f.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise DatasetError(f"{f}: not JSON: {exc}") from exc
        trajectories.append(trajectory_from_export(export, counter=counter))
    if not trajectories:
        raise DatasetError(f"{src}: no opencode exports found")
    return Dataset(
        name=name,
        version=version,
        trajectories=tuple(trajectories),
        metadata={"importer": "opencode", "files": [f.name for f in files]},
    )
