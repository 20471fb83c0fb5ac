"""The simulated serving system as a launcher.

Small profiles run as the real-time HTTP server (`python -m runner.simulator serve`) in a
subprocess, measured over loopback exactly like a real endpoint; rack-scale profiles run in
process on virtual time (`runner.simulator.virtual`), which the engine reaches through
`Target(sim_profile=...)`. Dispatch decides which (`launcher.clock`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from runner.launchers.base import (
    Endpoint,
    LauncherError,
    die_with_parent,
    free_port,
    stop_process_group,
    wait_for_models,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


class SimulatedLauncher:
    kind = "simulated"

    def __init__(self, config: dict[str, Any], *, log_dir: str) -> None:
        self.config = config
        self.log_path = Path(log_dir) / "simulator.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Endpoint:
        profile = str(self.config["profile"])
        seed = int(self.config.get("seed") or 0)
        served = str(self.config.get("served_model_name") or profile)
        if self.config.get("clock", "real") == "virtual":
            return Endpoint(
                served_model_name=served,
                sim_profile=profile,
                seed=seed,
                info={"launcher": "simulated", "profile": profile, "clock": "virtual"},
            )
        port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        command = [
            sys.executable,
            "-m",
            "runner.simulator",
            "serve",
            "--profile",
            profile,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--seed",
            str(seed),
        ]
        try:
            self.process = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        except OSError as exc:
            raise LauncherError(f"could not start the simulator: {exc}") from exc
        base_url = f"http://127.0.0.1:{port}/v1"
        models = wait_for_models(base_url, timeout_s=60, process=self.process, log_tail=self._tail)
        return Endpoint(
            served_model_name=served,
            base_url=base_url,
            seed=seed,
            info={"launcher": "simulated", "profile": profile, "clock": "real", "models": models},
        )

    def _tail(self) -> str:
        try:
            return self.log_path.read_bytes()[-4000:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is not None:
            stop_process_group(self.process, grace_s=10)
        log = getattr(self, "_log", None)
        if log is not None and not log.closed:
            log.close()

    def log_bytes(self) -> bytes:
        try:
            return self.log_path.read_bytes()
        except OSError:
            return b""
