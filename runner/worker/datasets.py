"""The pool host's dataset cache: a run's dataset is downloaded once per host, kept by its
file sha256 under the runner's cache folder, and checked against the run spec before use.
The run (runner/worker/director.py) and a load-generator host's shard task
(runner/worker/loadgen_hosts.py) both read their dataset here (docs/pipeline.md)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from agentperf.engine.trajectory import Dataset, dataset_from_bytes
from agentperf.files import write_atomically
from runner.worker.api_client import RunnerApi


class DatasetMismatch(Exception):
    """The dataset does not match the run spec's digests: retrying will not fix it (the run
    fails with this reason, as a RunFailure does)."""


def cache_dir() -> Path:
    """The runner's cache folder on this host (AGENTPERF_RUNNER_CACHE, else
    AGENTPERF_CACHE/runner, else ~/.cache/agentperf/runner), created owner-only."""
    root = os.environ.get("AGENTPERF_RUNNER_CACHE") or os.path.join(
        os.environ.get("AGENTPERF_CACHE") or os.path.expanduser("~/.cache/agentperf"), "runner"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    # The private test set lives here: the runner's user only, never a launched server's
    # (which also sees none of this host's folders: docs/security.md "Sandbox").
    os.chmod(path, 0o700)
    return path


def dataset_file(file_sha256: str) -> Path:
    """Where the dataset file with this sha256 is cached on this host."""
    return cache_dir() / "datasets" / f"{file_sha256}.jsonl.gz"


def fetch_dataset(api: RunnerApi, dataset: dict[str, Any]) -> Dataset:
    """Download the dataset once per host (cached by file sha256) and check it."""
    expected = str(dataset["file_sha256"])
    cached = dataset_file(expected)
    data = cached.read_bytes() if cached.exists() else b""
    if hashlib.sha256(data).hexdigest() != expected:
        data = api.download(str(dataset["url"]))
        if hashlib.sha256(data).hexdigest() != expected:
            raise DatasetMismatch("the downloaded dataset does not match the run spec's sha256")
        cached.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomically(cached, data, mode=0o600)  # the host's workers share the cache
    return checked_dataset(data, dataset)


def checked_dataset(data: bytes, dataset: dict[str, Any]) -> Dataset:
    """The dataset in ``data``, checked against the run spec's two digests (the file's
    sha256 and the canonical one); a DatasetMismatch names the one that differs."""
    if hashlib.sha256(data).hexdigest() != str(dataset["file_sha256"]):
        raise DatasetMismatch("the dataset file does not match the run spec's sha256")
    loaded = dataset_from_bytes(data, verify=True)
    if loaded.digest() != dataset["sha256"]:
        raise DatasetMismatch("the dataset's canonical digest does not match the run spec")
    return loaded
