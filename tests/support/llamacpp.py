"""A real llama.cpp server for tests, served by PyPI ``xllamacpp`` in a subprocess; the tiny
GGUF models it serves come from ``runner.launchers.tiny_gguf``.

- ``start_llama_server(model, ...)``: an OpenAI-compatible server on 127.0.0.1 (free port),
  one thread, in its own process so a test can kill it mid-stream; ``stop()`` ends it by PID.

Cache directory: ``$AGENTPERF_CACHE`` or ``~/.cache/agentperf``.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentperf.engine.datasets.aa_local import cache_dir

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(slots=True)
class LlamaServer:
    """A running llama.cpp server process."""

    process: subprocess.Popen[bytes]
    port: int
    model_path: Path
    alias: str
    n_parallel: int
    ctx_per_slot: int
    log_path: Path
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash would (for mid-stream failure tests)."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.process.wait(timeout=30)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def start_llama_server(
    model: Path,
    *,
    n_parallel: int = 1,
    ctx_per_slot: int = 4096,
    n_threads: int = 1,
    alias: str = "tiny",
    log_dir: Path | None = None,
    startup_timeout_s: float = 180.0,
) -> LlamaServer:
    """Start ``xllamacpp`` serving ``model`` on a free loopback port; wait for /v1/models.

    The KV cache is split per slot (not unified), so each of the ``n_parallel`` slots holds
    ``ctx_per_slot`` tokens and a longer prompt is refused with HTTP 400.
    """
    port = free_port()
    log_dir = log_dir or (cache_dir() / "logs")
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"llama-server-{port}.log"
    # the same server the process launcher runs (runner/launchers/llamacpp_server.py)
    command = [
        sys.executable, "-m", "runner.launchers.llamacpp_server", "--model", str(model),
        "--port", str(port), "--alias", alias, "--parallel", str(n_parallel),
        "--ctx-per-slot", str(ctx_per_slot), "--threads", str(n_threads),
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = LlamaServer(process, port, model, alias, n_parallel, ctx_per_slot, log_path)
    deadline = time.monotonic() + startup_timeout_s
    while True:
        if not server.alive():
            raise RuntimeError(f"llama.cpp server exited at startup:\n{server.log()[-4000:]}")
        try:
            with urllib.request.urlopen(server.base_url + "/v1/models", timeout=2) as resp:
                if resp.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            server.kill()
            raise RuntimeError(f"llama.cpp server not ready after {startup_timeout_s}s")
        time.sleep(0.1)
