"""Test-only Celery tasks, loaded by a worker started with `include=("tests.support.tasks",)`."""

from __future__ import annotations

import time
from pathlib import Path

from celery import shared_task

BLOCK_WORKER = "tests.block_worker"


@shared_task(name=BLOCK_WORKER, acks_late=True)
def block_worker(started_path: str, release_path: str, limit_s: float = 300.0) -> bool:
    """Occupy the worker as a benchmark run would, until `release_path` exists (the limit
    only keeps a forgotten test from holding the worker for ever)."""
    Path(started_path).touch()
    deadline = time.monotonic() + limit_s
    while not Path(release_path).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return True
