"""`manage.py demo` (started by `make demo`): the embedded default, end to end, on one machine.

Starts a real Celery worker process on the embedded SQLite broker and the web server on
127.0.0.1:8000, runs the demo steps registered in `DEMO_STEPS` (later stages submit and
run benchmarks) and stops both cleanly on Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from demo.front import nginx_binary, start_front

REPO = Path(settings.BASE_DIR)


def _spawn(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    handle = open(log, "ab")
    return subprocess.Popen(
        args,
        cwd=REPO,
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_http(url: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=10):
                return True
        except urllib.error.HTTPError:
            return True  # the server answers; /health may report a part as down
        except Exception:
            time.sleep(0.5)
    return False


def _stop(proc: subprocess.Popen, name: str) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    print(f"stopped {name}")


def _declare_queues(names: list[str]) -> None:
    """Create the broker's queues once, before the worker and the web server start: on the
    embedded SQLite broker, processes declaring the same new queue at the same moment race
    on its unique name, and the loser (once, the worker) dies with an IntegrityError."""
    # The project's Celery app (`config/celery.py`), current once Django is set up.
    from celery import current_app as app
    from kombu import Queue

    with app.connection_for_write() as conn:
        channel = conn.default_channel
        for name in names:
            Queue(name, routing_key=name).bind(channel).declare()


def _prepare_runs(*, host: str, port: int) -> None:
    """Build what the demo runs need (demo/steps.py); a failed build or Ctrl-C stops the
    registry it started too."""
    from demo.steps import prepare_environment, stop_environment

    try:
        prepare_environment(base_url=f"http://{host}:{port}")
    except BaseException:
        stop_environment()
        raise


def _start_worker(queues: str, logs: Path) -> subprocess.Popen:
    """One Celery worker process (concurrency 1) on ``queues``, logging to worker.log."""
    return _spawn(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "-Q",
            queues,
            "--concurrency",
            "1",
            "--loglevel",
            "INFO",
            "-n",
            "demo@%h",
        ],
        logs / "worker.log",
    )


def _start_web(
    *, host: str, port: int, logs: Path
) -> tuple[subprocess.Popen, subprocess.Popen | None]:
    """Gunicorn, behind nginx where nginx is installed; returns (gunicorn, nginx or None).

    nginx in front (demo/front.py): a slow client holds a connection of nginx's, never one
    of gunicorn's threads; gunicorn on a loopback port of its own, trusting that one proxy."""
    front_prefix = Path(settings.VAR_DIR) / "front"
    upstream_port = _free_port() if nginx_binary() else port
    web = _spawn(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "config.wsgi",
            "-c",
            "config/gunicorn.py",
            "-b",
            f"127.0.0.1:{upstream_port}" if upstream_port != port else f"{host}:{port}",
            "-w",
            "2",
            "--threads",
            "4",
            "--timeout",
            "120",
        ],
        logs / "web.log",
        env={"TRUSTED_PROXY_COUNT": "1"} if upstream_port != port else None,
    )
    front = None
    if upstream_port != port:
        front = start_front(
            host=host,
            port=port,
            upstream_port=upstream_port,
            prefix=front_prefix,
            log=logs / "front.log",
        )
    else:
        print("nginx is not installed: gunicorn serves directly, without a slow-client front")
    return web, front


def _run_until_stopped(
    *, url: str, logs: Path, children: list[subprocess.Popen], runs: bool
) -> int:
    """Wait for the site to answer, run the demo steps, then serve until a child exits
    (exit 1); Ctrl-C raises KeyboardInterrupt to the caller."""
    if not _wait_http(url + "health?format=json", 60):
        print(f"web server did not come up; see {logs / 'web.log'} and {logs / 'front.log'}")
        return 1
    print(f"\nAgentPerf is serving at {url}  (status: {url}health, admin: {url}admin/)")
    print(f"logs: {logs}   Ctrl-C stops the worker and the web server.\n", flush=True)
    if runs:
        from demo.steps import run_demo_steps

        run_demo_steps(base_url=url)
    while all(p.poll() is None for p in children):
        time.sleep(1)
    print("a child process exited; stopping")
    return 1


def _stop_all(
    *,
    front: subprocess.Popen | None,
    web: subprocess.Popen,
    worker: subprocess.Popen,
    runs: bool,
) -> None:
    """Stop the front, the web server and the worker (in that order), then what the demo
    runs started; a second Ctrl-C or SIGTERM must not interrupt the clean-up."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if front is not None:
        _stop(front, "front (nginx)")
    _stop(web, "web server")
    _stop(worker, "worker")
    if runs:
        from demo.steps import stop_environment

        stop_environment()


def serve(*, host: str, port: int, runs: bool) -> int:
    """Start the worker and the web server, run the demo steps, serve until Ctrl-C."""
    # SIGTERM (from a supervisor or `timeout`) stops the children just like Ctrl-C.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    logs = Path(settings.VAR_DIR) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if runs:
        _prepare_runs(host=host, port=port)
    queues = os.environ.get("DEMO_QUEUES", "web,pool.local-cpu,pool.simulated")
    _declare_queues(queues.split(","))
    worker = _start_worker(queues, logs)
    web, front = _start_web(host=host, port=port, logs=logs)
    children = [p for p in (worker, web, front) if p is not None]
    try:
        return _run_until_stopped(
            url=f"http://{host}:{port}/", logs=logs, children=children, runs=runs
        )
    except KeyboardInterrupt:
        print("\nstopping…")
        return 0
    finally:
        _stop_all(front=front, web=web, worker=worker, runs=runs)


class Command(BaseCommand):
    help = "Seeded demo: a Celery worker, the web server and the demo runs (make demo)."

    def add_arguments(self, parser) -> None:  # type: ignore[no-untyped-def]
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--no-runs", action="store_true", help="serve only, submit no demo runs"
        )

    def handle(self, *args: object, **options: object) -> None:
        code = serve(
            host=str(options["host"]), port=int(str(options["port"])), runs=not options["no_runs"]
        )
        if code:
            raise CommandError(f"the demo stopped (exit {code})")
