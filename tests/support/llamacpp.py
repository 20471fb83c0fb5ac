"""A real llama.cpp server for tests, served by PyPI ``xllamacpp`` in a subprocess; the tiny
GGUF models it serves come from ``runner.launchers.tiny_gguf``.

- ``start_llama_server(model, ...)``: an OpenAI-compatible server on 127.0.0.1 (free port),
  one thread, in its own process so a test can kill it mid-stream; ``stop()`` ends it by PID.

Cache directory: ``$AGENTPERF_CACHE`` or ``~/.cache/agentperf``.
"""

from __future__ import annotations

import json
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

from runner.engine.datasets.aa_local import cache_dir

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
    config = {
        "model": str(model),
        "port": port,
        "n_parallel": n_parallel,
        "n_ctx": ctx_per_slot * n_parallel,
        "n_threads": n_threads,
        "alias": alias,
    }
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.llamacpp", json.dumps(config)],
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


def _serve(config: dict[str, Any]) -> None:
    """Child process: build the params, start the server, wait for a signal."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = config["model"]
    params.model_alias = {config["alias"]}
    params.hostnames = ["127.0.0.1"]
    params.port = config["port"]
    params.n_parallel = config["n_parallel"]
    params.n_ctx = config["n_ctx"]
    params.kv_unified = False
    params.cont_batching = True
    params.cache_prompt = True
    params.n_gpu_layers = 0
    params.warmup = False
    params.use_jinja = True
    params.endpoint_metrics = True
    params.cpuparams.n_threads = config["n_threads"]
    params.cpuparams_batch.n_threads = config["n_threads"]
    params.n_threads_http = max(2, config["n_parallel"] + 2)
    params.verbosity = 1
    params.sampling.seed = 1234
    server = xllamacpp.Server(params)
    stop = False

    def on_term(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    while not stop:
        signal.pause()
    del server


if __name__ == "__main__":
    _serve(json.loads(sys.argv[1]))
