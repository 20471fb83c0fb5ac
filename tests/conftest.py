"""Shared fixtures: the permission-test cast, a real Celery worker, artifact folders."""

from __future__ import annotations

import json
import os
import resource
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

# One queue namespace per test session, so concurrent sessions on a shared broker never
# consume each other's messages: tests/services.py sets it before pytest starts (pytest-
# django reads the settings before this file runs); this covers a bare `pytest` run's
# worker processes only.
os.environ.setdefault("CELERY_QUEUE_PREFIX", f"test-{uuid.uuid4().hex[:8]}.")
# Likewise one cache key prefix (tests/services.py points the session at a shared Redis).
os.environ.setdefault("CACHE_KEY_PREFIX", f"test-{uuid.uuid4().hex[:8]}")
os.environ.setdefault("EMAIL_BACKEND", "django.core.mail.backends.locmem.EmailBackend")

ARTIFACTS_DIR = Path(__file__).resolve().parent.parent / "test-artifacts"

# Debian's Chromium, never a downloaded browser; no background traffic off the machine.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    """The wall-clock time the session's first test starts, written once to the file
    TEST_FIRST_TEST_FILE names (tests/shards.py reports each shard's wait before it)."""
    path = os.environ.get("TEST_FIRST_TEST_FILE")
    if path and not os.path.exists(path):
        Path(path).write_text(f"{time.time():.3f}\n")


def _cpu_seconds() -> float:
    """User + system CPU of this process and every child it has waited for so far."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_CPU_PER_FILE: defaultdict[str, float] = defaultdict(float)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """CPU seconds per test file (setup, call and teardown, its servers and workers once
    they are reaped), written at the end to the file TEST_CPU_FILE names (tests/shards.py
    prints the largest; docs/benchmarks.md "The test suite")."""
    before = _cpu_seconds()
    yield
    _CPU_PER_FILE[item.location[0]] += _cpu_seconds() - before


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get("TEST_CPU_FILE")
    if path and _CPU_PER_FILE:
        per_file = {name: round(s, 1) for name, s in sorted(_CPU_PER_FILE.items())}
        Path(path).write_text(json.dumps(per_file, indent=1) + "\n")


@pytest.fixture
def artifacts_dir(request) -> Path:
    """A folder kept after the run (screenshots, logs) for this test."""
    path = ARTIFACTS_DIR / request.node.name.replace("/", "_")[:120]
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def celery_worker(request, tmp_path, transactional_db):
    """Start a real worker process on the web queue (plus any given by `worker_queues`)."""
    from core.queues import web_queue
    from tests.support.workers import start_worker

    marker = request.node.get_closest_marker("worker_queues")
    extra = list(marker.args) if marker else []
    worker = start_worker([web_queue(), *extra], tmp_path / "worker.log")
    yield worker
    worker.stop()


@pytest.fixture
def tasks_in_process():
    """Queued tasks run here, at once (Celery eager mode), errors raised: for tests whose
    code under test queues a task on commit and that need its effect, with no worker."""
    from config.celery import app

    keys = ("task_always_eager", "task_eager_propagates")
    before = {key: app.conf[key] for key in keys}
    app.conf.update(dict.fromkeys(keys, True))
    yield
    app.conf.update(before)


@pytest.fixture
def cast(db):
    """Vendor Alice (org A), vendor Bob (org B), reviewer Rita (staff, no org)."""
    from tests.support.builders import make_cast

    return make_cast()


@pytest.fixture
def browser(monkeypatch):
    # Playwright's sync API runs an event loop in this thread; the ORM calls the test makes
    # between browser steps are ordinary synchronous calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
