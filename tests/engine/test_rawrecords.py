"""The raw request records format, one module for every reader and writer
(agentperf/engine/rawrecords.py): JSONL files round-trip, the stored object is the same
bytes for the same records, and the streamed reader gives the same lines whatever the chunk
boundaries, compressed or plain."""

from __future__ import annotations

import gzip
from typing import Any

from agentperf.engine import rawrecords
from tests.engine.test_metrics import rec


def _records() -> list[Any]:
    return [rec(i * 1_000, rid=f"r{i}", n_out=5 + i) for i in range(40)] + [
        rec(99_000, rid="failed", ok=False)
    ]


def test_records_round_trip_through_jsonl(tmp_path: Any) -> None:
    rs = [rec(i) for i in range(3)]
    path = tmp_path / "r.jsonl"
    assert rawrecords.write(path, rs) == 3
    assert rawrecords.read(path) == rs
    assert list(rawrecords.iter_file(path)) == rs


def test_the_stored_object_is_deterministic_and_decodes_to_the_records() -> None:
    rs = _records()
    blob, count = rawrecords.encode(rs)
    assert count == len(rs)
    assert blob[:2] == rawrecords.GZIP_MAGIC
    assert rawrecords.encode(rs)[0] == blob  # same records, same bytes (the receipt signs them)
    assert rawrecords.decode(blob) == rs
    plain = gzip.decompress(blob)
    assert rawrecords.decompress(blob) == plain and rawrecords.decompress(plain) == plain
    assert rawrecords.decode(plain) == rs  # an object stored uncompressed reads the same


def test_streamed_lines_are_the_same_at_any_chunk_boundary() -> None:
    rs = _records()
    blob, _ = rawrecords.encode(rs)
    plain = gzip.decompress(blob)
    expected = [rawrecords.line(r).rstrip(b"\n") for r in rs]
    for data in (blob, plain):
        for size in (1, 7, 64, 4096, len(data)):
            chunks = [data[i : i + size] for i in range(0, len(data), size)]
            lines = list(rawrecords.iter_lines(chunks))
            assert lines == expected, (data[:2], size)
            assert [rawrecords.parse(x) for x in lines] == rs
    # a last line without its newline is still a line
    assert list(rawrecords.iter_lines([plain.rstrip(b"\n")])) == expected
