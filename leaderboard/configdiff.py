"""The one config diff (pure functions, no Django): the review console's two-way diff
(`config_diff`) and the compare page's side-by-side table (`config_table`) walk documents the
same way, name fields with the same paths (`engine.args.max_num_seqs`, `roles[0].tp`, a key
that would read ambiguously quoted) and call two values equal by the same rule
(`same_value`: 1 and 1.0 are equal, True and 1 are not). Callers redact first."""

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


def config_path(prefix: str, key: Any) -> str:
    """``prefix`` extended by a mapping key or a list index."""
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
            _walk(old.get(key, _MISSING), new.get(key, _MISSING), config_path(path, key), out)
        return
    if isinstance(old, list) and isinstance(new, list):
        for i in range(max(len(old), len(new))):
            _walk(
                old[i] if i < len(old) else _MISSING,
                new[i] if i < len(new) else _MISSING,
                config_path(path, i),
                out,
            )
        return
    if not same_value(old, new):
        out.append(DiffEntry(path or "(document)", CHANGED, old, new))


def same_value(a: Any, b: Any) -> bool:
    """Equal leaves: the same type and value, except that 1 and 1.0 are the same number in a
    config (True and 1 are not)."""
    if a == b and type(a) is type(b):
        return True
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


ABSENT = _MISSING  # a field one config of a table does not have


def config_leaves(doc: Any, path: str = "") -> dict[str, Any]:
    """``{path: value}`` for every leaf of a document, in document order: mappings by key,
    lists by position; an empty mapping or list is a leaf of its own."""
    if isinstance(doc, dict) and doc:
        out: dict[str, Any] = {}
        for key, value in doc.items():
            out.update(config_leaves(value, config_path(path, key)))
        return out
    if isinstance(doc, list) and doc:
        out = {}
        for i, value in enumerate(doc):
            out.update(config_leaves(value, config_path(path, i)))
        return out
    if not path:  # an empty document has no fields; a bare scalar is one
        return {} if isinstance(doc, (dict, list)) else {"(document)": doc}
    return {path: doc}


@dataclass(frozen=True, slots=True)
class TableRow:
    """One field of a side-by-side table: each config's value (ABSENT where it has none)."""

    path: str
    values: tuple[Any, ...]
    changed: bool


def config_table(configs: list[Any]) -> list[TableRow]:
    """Every leaf path of any of ``configs`` (None counts as empty) with each one's value,
    sorted by path; ``changed`` when the values are not all `same_value`."""
    leaves = [config_leaves({} if c is None else c) for c in configs]
    paths = sorted({path for flat in leaves for path in flat})
    rows = []
    for path in paths:
        values = tuple(flat.get(path, ABSENT) for flat in leaves)
        first = values[0]
        changed = any(
            (v is ABSENT) != (first is ABSENT) or (v is not ABSENT and not same_value(first, v))
            for v in values[1:]
        )
        rows.append(TableRow(path, values, changed))
    return rows
