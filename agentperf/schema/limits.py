"""Input limits checked before and right after parsing (docs/security.md "Input limits").

The JSON and YAML readers recurse once per nesting level, so a deeply nested body would
exhaust Python's stack inside them. The depth is therefore measured first, without
recursion: a token scan of the raw JSON text, or the YAML parser's event stream (an
explicit-stack state machine; only the composer that builds nodes from events recurses).
Once the data is parsed (and known to be shallow), one iterative walk refuses what no field
of ours may hold: non-finite numbers (``Infinity``, ``NaN``, ``.inf``, ``1e400``) and
control characters in any string or key. Every refusal is a :class:`LimitError` whose
``fields`` maps the dotted path of the offending field to messages.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import yaml

from agentperf.fielderrors import NON_FIELD

# Levels of nesting a body may have; the document's top-level mapping is level 1. Our
# deepest real field (a patch inside engine.patches) is at level 4.
MAX_DEPTH = 64
# Leading keys kept in the path that names a too-deep field.
PATH_SEGMENTS = 8
# Errors reported per body: enough to fix a document, bounded for a hostile one.
MAX_ERRORS = 20

# C0 controls except tab, line feed and carriage return; DEL and the C1 controls; the
# Unicode line/paragraph separators; bidirectional embeddings, overrides and isolates
# (they reorder text shown on public pages); lone surrogates (not encodable as UTF-8).
_CONTROL = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
# A JSON string (possessive, so an unterminated one costs one linear pass) or a
# structural character; everything else is skipped by the scan.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]++|\\.)*+"|[\[\]{},]')


class LimitError(ValueError):
    """A body refused by a limit; `fields` maps dotted paths to messages."""

    def __init__(self, code: str, message: str, fields: dict[str, list[str]]) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fields = fields


def _name(path: list[Any]) -> str:
    """The path that names a too-deep value: its leading keys, list indices after the
    last key dropped (`notes.0.0.0…` names `notes`)."""
    segments = [str(p) for p in path]
    while segments and isinstance(path[len(segments) - 1], int):
        segments.pop()
    return ".".join(segments[:PATH_SEGMENTS]) or NON_FIELD


def _too_deep(path: list[Any], limit: int) -> LimitError:
    where = _name(path)
    return LimitError(
        "too_deep",
        f"the body nests more than {limit} levels deep",
        {where: [f"nests more than {limit} levels deep; nothing was stored"]},
    )


def check_json_depth(text: str, limit: int = MAX_DEPTH) -> None:
    """Raise LimitError when the JSON `text` nests deeper than `limit` (before json.loads)."""
    # one frame per open container: [is_object, current key or index, expecting a key]
    stack: list[list[Any]] = []
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token[0] == '"':
            if stack and stack[-1][0] and stack[-1][2]:
                try:
                    key = json.loads(token) if len(token) <= 400 else token[1:60]
                except ValueError:
                    key = token[1:-1][:60]
                stack[-1][1], stack[-1][2] = key, False
        elif token in "[{":
            if len(stack) >= limit:
                raise _too_deep([frame[1] for frame in stack], limit)
            stack.append([token == "{", None if token == "{" else 0, token == "{"])
        elif token in "]}":
            if stack:
                stack.pop()
        elif stack:  # a comma
            if stack[-1][0]:
                stack[-1][2] = True
            else:
                stack[-1][1] += 1


def check_yaml_depth(text: str, limit: int = MAX_DEPTH) -> None:
    """Raise LimitError when the YAML `text` nests deeper than `limit`, from the event
    stream (no node is composed). Unreadable YAML raises yaml.YAMLError as the loader would."""
    # one frame per open collection: [is_mapping, current key or index, at a key]
    stack: list[list[Any]] = []

    def node_ended() -> None:
        if not stack:
            return
        frame = stack[-1]
        if frame[0]:
            frame[2] = not frame[2]
        else:
            frame[1] += 1

    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)):
            if stack and stack[-1][0] and stack[-1][2]:
                value = getattr(event, "value", None)
                stack[-1][1] = value[:60] if isinstance(value, str) else "?"
            if isinstance(event, yaml.CollectionStartEvent):
                if len(stack) >= limit:
                    raise _too_deep([frame[1] for frame in stack], limit)
                is_map = isinstance(event, yaml.MappingStartEvent)
                stack.append([is_map, None if is_map else 0, is_map])
            else:
                node_ended()
        elif isinstance(event, yaml.CollectionEndEvent):
            stack.pop()
            node_ended()


def _walk(data: Any) -> Iterator[tuple[str, Any, bool]]:
    """(dotted path, value, is_key) for every scalar and key, iteratively."""
    pending: list[tuple[str, Any]] = [("", data)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                key_text = str(key)
                yield path, key, True
                safe = _CONTROL.sub("?", key_text)
                pending.append((f"{path}.{safe}" if path else safe, item))
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                pending.append((f"{path}.{index}" if path else str(index), item))
        else:
            yield path, value, False


def _control_message(text: str, is_key: bool) -> str | None:
    found = _CONTROL.search(text)
    if found is None:
        return None
    what = "a key" if is_key else "the text"
    return (
        f"{what} contains the control character U+{ord(found.group()):04X} at position "
        f"{found.start()}; only tab, line feed and carriage return are allowed"
    )


# What no database column can store, even in measured text: NUL, and lone surrogates
# (a JSON `\ud800` escape), which have no UTF-8 form.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def value_problems(data: Any, *, measured_text: bool = False) -> dict[str, list[str]]:
    """{path: [message]} for non-finite numbers and control characters anywhere in `data`.

    `measured_text`: the body carries what a model answered (the runner API's probe
    evidence), where any character is data; only NUL and lone surrogates are refused
    there, which a JSON column cannot store."""
    fields: dict[str, list[str]] = {}
    count = 0
    for path, value, is_key in _walk(data):
        message: str | None = None
        if isinstance(value, float) and not math.isfinite(value):
            message = (
                "must be a finite number (Infinity, NaN and numbers too large for a float "
                "are refused)"
            )
        elif isinstance(value, str) and measured_text:
            found = _UNSTORABLE.search(value)
            if found:
                what = "a NUL character" if found.group() == "\x00" else "a lone surrogate"
                message = f"contains {what} at position {found.start()}, which cannot be stored"
        elif isinstance(value, str):
            message = _control_message(value, is_key)
        if message is not None:
            fields.setdefault(path or NON_FIELD, []).append(message)
            count += 1
            if count >= MAX_ERRORS:
                break
    return fields


def check_values(data: Any, code: str = "invalid", *, measured_text: bool = False) -> None:
    """Raise LimitError naming each non-finite number and control character in `data`."""
    fields = value_problems(data, measured_text=measured_text)
    if fields:
        raise LimitError(
            code,
            f"the body has {sum(len(v) for v in fields.values())} value(s) no field accepts",
            fields,
        )


def _keep_constant(name: str) -> float:
    # json.loads calls this for Infinity, -Infinity and NaN; check_values names the field
    return float(name)


def load_json(text: str, *, measured_text: bool = False, **kwargs: Any) -> Any:
    """json.loads after the depth check, with non-finite numbers and control characters
    refused by path (LimitError); ValueError for malformed JSON as json.loads raises it."""
    check_json_depth(text)
    data = json.loads(text, parse_constant=_keep_constant, **kwargs)
    check_values(data, measured_text=measured_text)
    return data
