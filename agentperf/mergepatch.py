"""JSON Merge Patch (RFC 7396): how a ladder's change is written (docs/engine.md "ladder").

A patch is a JSON object merged into the document: a key with ``null`` removes that key,
an object merges recursively, anything else (a list, a number, a string) replaces the
value. Used by the engine's ladders (a simulator profile patched per rung), by the
platform's ladder submissions (a deployment config patched per rung) and by a simulated
deployment's profile overrides (docs/simulator.md "Overrides").
"""

from __future__ import annotations

import copy
from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with ``patch`` applied (RFC 7396 §2); neither argument is modified."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def patch_paths(patch: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the leaves a patch sets or removes (``a.b`` for ``{a: {b: 1}}``)."""
    if not isinstance(patch, dict) or not patch:
        return [prefix] if prefix else []
    out: list[str] = []
    for key, value in patch.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.extend(patch_paths(value, path))
        else:
            out.append(path)
    return out


def overlapping(a: Any, b: Any) -> list[str]:
    """Paths two patches both touch (one a prefix of the other counts): the changes are
    independent, and their order cannot matter to the patched document, when this is empty."""
    pa, pb = patch_paths(a), patch_paths(b)
    out = []
    for x in pa:
        for y in pb:
            if x == y or x.startswith(y + ".") or y.startswith(x + "."):
                out.append(x if len(x) >= len(y) else y)
    return sorted(set(out))
