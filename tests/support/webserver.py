"""gunicorn in its own process group on a free loopback port, against the test database:
the production server with several worker processes, for tests that must cross processes
(docs/security.md "Shared state across processes") or speak real HTTP to it."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.support.llamacpp import free_port
from tests.support.workers import spawn_in_group, stop_group


@dataclass
class WebServer:
    process: subprocess.Popen
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def worker_pids(self) -> set[int]:
        """The pids of gunicorn's worker processes (children of the arbiter)."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return {int(p) for p in children.read_text().split()} if children.exists() else set()

    def stop(self) -> None:
        stop_group(self.process, grace_s=30)


def start_gunicorn(
    log_path: Path,
    *,
    workers: int = 2,
    env: dict[str, str] | None = None,
    ready_timeout: float = 60.0,
    port: int | None = None,
) -> WebServer:
    """Start `gunicorn config.wsgi` with `workers` processes and wait until it answers
    (on `port`, else a free one)."""
    port = port or free_port()
    args = [
        sys.executable,
        "-m",
        "gunicorn",
        "config.wsgi",
        "-c",
        "config/gunicorn.py",
        "-b",
        f"127.0.0.1:{port}",
        "-w",
        str(workers),
        "--access-logfile",
        "-",
        "--timeout",
        "120",
    ]
    process = spawn_in_group(args, log_path, env=env)
    server = WebServer(process, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited early:\n{server.log()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/api/v1/schema/deployment-config.json"):
                pass
        except urllib.error.HTTPError:
            pass  # answering is enough
        except OSError:
            time.sleep(0.2)
            continue
        if len(server.worker_pids()) >= workers:
            return server
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"gunicorn not ready in {ready_timeout} s:\n{server.log()[-3000:]}")
