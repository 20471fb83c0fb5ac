"""agentperf/files.py: a cache file is written through this process's own temporary file
and renamed over the target, with its permission bits set before any byte."""

from __future__ import annotations

import os
import stat

from agentperf.files import private_tmp, write_atomically


def test_the_temporary_file_is_this_processs_own_and_none_is_left(tmp_path):
    target = tmp_path / "ds.jsonl.gz"
    assert private_tmp(target) == tmp_path / f"ds.jsonl.gz.{os.getpid()}.tmp"
    target.write_bytes(b"old")
    write_atomically(target, b"new")
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds.jsonl.gz"]


def test_a_mode_is_the_files_permission_bits(tmp_path):
    target = tmp_path / "cached"
    write_atomically(target, b"secret-ish", mode=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert target.read_bytes() == b"secret-ish"
