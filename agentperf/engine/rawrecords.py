"""The raw request records format, read and written here only (docs/metrics.md "Raw request
records"): one JSON object per line, `RequestRecord.to_dict()`. A trial's records are stored
gzip-compressed with deterministic bytes (level 6, mtime 0), so the same records always give
the same object and the same digest (the receipt signs it: docs/verification.md "Receipt").

Writers: the engine's trial output (`requests.jsonl`), a shard's `records.jsonl`, the pool
worker's stored object (`encode`). Readers: whole files (`read`, `iter_file`), stored
objects (`decode`), and streams of compressed or plain chunks (`iter_lines`).
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from agentperf.engine.metrics import RequestRecord

GZIP_MAGIC = b"\x1f\x8b"


def line(record: RequestRecord) -> bytes:
    """One record as its JSONL line (newline included)."""
    return orjson.dumps(record.to_dict()) + b"\n"


def parse(raw: bytes) -> RequestRecord:
    """One JSONL line as its record."""
    return RequestRecord.from_dict(orjson.loads(raw))


def write(path: str | Path, records: Iterable[RequestRecord]) -> int:
    """Write ``records`` to ``path`` as plain JSONL; returns how many."""
    count = 0
    with open(path, "wb", buffering=1 << 20) as fh:
        for record in records:
            fh.write(line(record))
            count += 1
    return count


def iter_file(path: str | Path) -> Iterator[RequestRecord]:
    """Each record of a plain JSONL file, read as it goes."""
    with open(path, "rb") as fh:
        for raw in fh:
            if raw.strip():
                yield parse(raw)


def read(path: str | Path) -> list[RequestRecord]:
    """Every record of a plain JSONL file."""
    return list(iter_file(path))


def compress(jsonl: bytes) -> bytes:
    """JSONL bytes as the stored object: gzip with deterministic bytes."""
    return gzip.compress(jsonl, compresslevel=6, mtime=0)


def encode(records: Iterable[RequestRecord]) -> tuple[bytes, int]:
    """Records as the stored object, and their count."""
    lines = [line(r) for r in records]
    return compress(b"".join(lines)), len(lines)


def decompress(blob: bytes) -> bytes:
    """A stored object's JSONL bytes (a plain object is returned as it is)."""
    return gzip.decompress(blob) if blob[:2] == GZIP_MAGIC else blob


def decode(blob: bytes) -> list[RequestRecord]:
    """Every record of a stored object (gzip or plain)."""
    return [parse(raw) for raw in decompress(blob).splitlines() if raw.strip()]


def iter_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Each JSONL line of a stored object read in chunks (gzip or plain, told by its first
    two bytes however the chunks split them), decompressed as it streams."""
    inflate: Any = None
    head: bytes | None = b""  # the first bytes, until there are two to tell the format by
    pending = b""
    for chunk in chunks:
        if head is not None:
            head += chunk
            if len(head) < len(GZIP_MAGIC):
                continue
            chunk, head = head, None
            if chunk[:2] == GZIP_MAGIC:
                inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        pending += inflate.decompress(chunk) if inflate is not None else chunk
        *lines, pending = pending.split(b"\n")
        for raw in lines:
            if raw.strip():
                yield raw
    if head:  # an object shorter than the magic: plain
        pending += head
    if inflate is not None:
        pending += inflate.flush()
    for raw in pending.split(b"\n"):
        if raw.strip():
            yield raw
