"""A readable diff of two nested configuration documents (pure functions, no Django)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ADDED = "added"
REMOVED = "removed"
CHANGED = "changed"

_MISSING = object()


@dataclass(frozen=True, slots=True)
class DiffEntry:
    """One difference at a dotted key path (``engine.args.max_num_seqs``, ``env[2]``)."""

    path: str
    kind: str  # added | removed | changed
    old: Any = None
    new: Any = None


def _join(prefix: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    text = str(key)
    # Keys that would read ambiguously in a dotted path are quoted.
    if not text or any(ch in text for ch in ".[] "):
        text = repr(text)
    return f"{prefix}.{text}" if prefix else text


def _walk(old: Any, new: Any, path: str, out: list[DiffEntry]) -> None:
    if old is _MISSING:
        out.append(DiffEntry(path, ADDED, None, new))
        return
    if new is _MISSING:
        out.append(DiffEntry(path, REMOVED, old, None))
        return
    if isinstance(old, dict) and isinstance(new, dict):
        keys = list(old)
        keys += [k for k in new if k not in old]
        for key in sorted(keys, key=str):
            _walk(old.get(key, _MISSING), new.get(key, _MISSING), _join(path, key), out)
        return
    if isinstance(old, list) and isinstance(new, list):
        for i in range(max(len(old), len(new))):
            _walk(
                old[i] if i < len(old) else _MISSING,
                new[i] if i < len(new) else _MISSING,
                _join(path, i),
                out,
            )
        return
    # 1 and 1.0 are the same number in a config, True and 1 are not.
    if (old == new and type(old) is type(new)) or _same_number(old, new):
        return
    out.append(DiffEntry(path or "(document)", CHANGED, old, new))


def _same_number(a: Any, b: Any) -> bool:
    numeric = (int, float)
    return (
        isinstance(a, numeric)
        and isinstance(b, numeric)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
        and a == b
    )


def config_diff(old: Any, new: Any) -> list[DiffEntry]:
    """Every leaf that differs between ``old`` and ``new``, sorted by key path.

    Dicts are compared key by key, lists position by position; a subtree that exists on
    one side only is reported once at its root (not leaf by leaf), so adding a whole
    section reads as one line. ``None`` on either side counts as an empty document.
    """
    out: list[DiffEntry] = []
    _walk({} if old is None else old, {} if new is None else new, "", out)
    return out


def diff_summary(entries: list[DiffEntry]) -> dict[str, int]:
    """Counts per kind, for a one-line summary above the table."""
    counts = {ADDED: 0, REMOVED: 0, CHANGED: 0}
    for entry in entries:
        counts[entry.kind] += 1
    return counts
