"""Files that several processes on one host write: the dataset caches, the tiny GGUF and its
vocabulary. A writer never opens the final path; it writes a temporary file of its own
(its PID in the name, so two writers never share one) and renames it over the target, so a
reader sees the old file or the whole new one."""

from __future__ import annotations

import os
from pathlib import Path


def private_tmp(target: Path) -> Path:
    """This process's temporary file beside `target` (renamed over it when complete)."""
    return target.with_name(f"{target.name}.{os.getpid()}.tmp")


def write_atomically(target: Path, data: bytes, *, mode: int | None = None) -> None:
    """Write `data` to `target` through `private_tmp(target)`; `mode`: the file's permission
    bits, set before any byte is written."""
    tmp = private_tmp(target)
    if mode is not None:
        tmp.touch(mode=mode)
    tmp.write_bytes(data)
    os.replace(tmp, target)
