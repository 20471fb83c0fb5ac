"""A real Celery worker in its own process, for tests that go through the broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import connection

REPO = Path(__file__).resolve().parents[2]


def worker_env(**overrides: str) -> dict[str, str]:
    """The environment a worker needs to see the test database, broker, queues and S3."""
    env = dict(os.environ)
    db = connection.settings_dict
    if "postgresql" in db["ENGINE"]:
        user = db["USER"] or "postgres"
        env["DATABASE_URL"] = (
            f"postgresql://{user}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
        )
    else:
        env["DATABASE_URL"] = f"sqlite:///{db['NAME']}"
    env["CELERY_QUEUE_PREFIX"] = settings.CELERY_QUEUE_PREFIX
    env.update(overrides)
    return env


def spawn_in_group(
    args: list[str], log_path: Path, *, env: dict[str, str] | None
) -> subprocess.Popen:
    """`args` from the repository root in a process group of its own, output to `log_path`."""
    log = open(log_path, "wb")
    return subprocess.Popen(
        args,
        cwd=REPO,
        env=env or worker_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_group(process: subprocess.Popen, *, grace_s: float) -> None:
    """SIGTERM the process group, SIGKILL it after `grace_s`."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


@dataclass
class WorkerProcess:
    process: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Kill the worker's whole process group (the main process and its pool children)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        stop_group(self.process, grace_s=20)


def start_worker(
    queues: list[str],
    log_path: Path,
    *,
    env: dict[str, str] | None = None,
    ready_timeout: float = 60.0,
    include: tuple[str, ...] = (),
) -> WorkerProcess:
    """Start `celery worker` consuming `queues` and wait until it is ready; `include`: extra
    task modules to import (test-only tasks such as tests.support.tasks)."""
    args = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "config",
        "worker",
        "-Q",
        ",".join(queues),
        "--concurrency",
        "1",
        "--pool",
        "prefork",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "--loglevel",
        "INFO",
        "-n",
        f"test-{os.getpid()}-{time.monotonic_ns()}@%h",
        *[arg for module in include for arg in ("-I", module)],
    ]
    process = spawn_in_group(args, log_path, env=env)
    handle = WorkerProcess(process, log_path)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"worker exited early:\n{handle.log()[-3000:]}")
        if "ready." in handle.log():
            return handle
        time.sleep(0.2)
    handle.stop()
    raise RuntimeError(f"worker not ready in {ready_timeout} s:\n{handle.log()[-3000:]}")


def drop_queued(queue: str) -> int:
    """Drop every message waiting in `queue` (the broker's own purge) and say how many: a
    test that starts a worker and counts its task events must not also see the tasks that
    earlier tests of the session queued with no worker running (their rebuilds, purges)."""
    from config.celery import app

    with app.connection_for_write() as conn:
        channel = conn.default_channel
        try:
            return int(channel.queue_purge(queue) or 0)
        except Exception as exc:  # no such queue yet: nothing is waiting in it
            if "NOT_FOUND" in str(exc) or "no queue" in str(exc).lower():
                return 0
            raise
