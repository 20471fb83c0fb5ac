"""`attached` and `process` launchers."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from runner.launchers.base import (
    Endpoint,
    LauncherError,
    list_models,
    stop_process_group,
    wait_for_models,
)

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
LOG_TAIL_BYTES = 4000


def _die_with_parent() -> None:
    """In the child: get SIGKILL when the worker dies, so no orphan server keeps the port."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: the reaper's retry will find the port busy and say so
        pass


def port_in_use(port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.3)
        return s.connect_ex(("127.0.0.1", port)) == 0


class AttachedLauncher:
    """An endpoint that is already running; the URL came from the pool's allowlist."""

    kind = "attached"

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def start(self) -> Endpoint:
        url = self.config.get("url")
        if not url:
            raise LauncherError(
                f"endpoint {self.config.get('endpoint_id')!r} has no URL in the pool allowlist"
            )
        api_key = None
        key_env = self.config.get("api_key_env")
        if key_env:
            api_key = os.environ.get(key_env)
        try:
            models = list_models(url, timeout_s=15.0, api_key=api_key)
        except Exception as exc:
            raise LauncherError(f"attached endpoint {url} is not reachable: {exc}") from exc
        return Endpoint(
            served_model_name=self.config["served_model_name"],
            base_url=url,
            api_key=api_key,
            info={
                "launcher": "attached",
                "endpoint_id": self.config.get("endpoint_id"),
                "models": models,
            },
        )

    def stop(self) -> None:
        return None

    def log_bytes(self) -> bytes:
        return b""


def resolve_env(env: dict[str, Any]) -> dict[str, str]:
    """The launcher's environment: clear values as given, secrets from the host's env."""
    out: dict[str, str] = {}
    for name, value in env.items():
        if isinstance(value, dict) and value.get("secret"):
            if name not in os.environ:
                raise LauncherError(f"secret {name} is not set in the runner host's environment")
            out[name] = os.environ[name]
        else:
            out[name] = str(value)
    return out


def substitute(items: list[str], variables: dict[str, str]) -> list[str]:
    """`${VAR}` replaced from `variables`; an unknown variable is an error, not ""."""

    def one(text: str) -> str:
        def repl(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in variables:
                raise LauncherError(f"${{{name}}} in the command is not set")
            return variables[name]

        return _VAR.sub(repl, text)

    return [one(item) for item in items]


class ProcessLauncher:
    """Start the vendor's command on this host, wait for `/v1/models`, stop it after."""

    kind = "process"

    def __init__(self, config: dict[str, Any], *, log_dir: str) -> None:
        self.config = config
        self.log_path = Path(log_dir) / "launcher.log"
        self.process: subprocess.Popen[bytes] | None = None

    def _tail(self) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-LOG_TAIL_BYTES:].decode(errors="replace")

    def start(self) -> Endpoint:
        port = int(self.config["port"])
        deadline = time.monotonic() + 10
        while port_in_use(port):
            if time.monotonic() > deadline:
                raise LauncherError(
                    f"port {port} is already in use on the runner host; refusing to measure "
                    "a server the runner did not start"
                )
            time.sleep(0.5)
        env = resolve_env(self.config.get("env") or {})
        variables = {**os.environ, **env, "PORT": str(port)}
        command = substitute(list(self.config["command"]), variables)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self._log = log
        try:
            self.process = subprocess.Popen(
                command,
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        except OSError as exc:
            log.close()
            raise LauncherError(f"could not start {command[0]!r}: {exc}") from exc
        base_url = f"http://127.0.0.1:{port}/v1"
        started = time.monotonic()
        models = wait_for_models(
            base_url,
            timeout_s=float(self.config.get("ready_timeout_s") or 600),
            process=self.process,
            log_tail=self._tail,
        )
        return Endpoint(
            served_model_name=self.config["served_model_name"],
            base_url=base_url,
            info={
                "launcher": "process",
                "command": command[:1],
                "pid": self.process.pid,
                "ready_after_s": round(time.monotonic() - started, 3),
                "models": models,
            },
        )

    def stop(self) -> None:
        if self.process is not None:
            stop_process_group(self.process)
        log = getattr(self, "_log", None)
        if log is not None and not log.closed:
            log.close()

    def log_bytes(self) -> bytes:
        try:
            return self.log_path.read_bytes()
        except OSError:
            return b""
