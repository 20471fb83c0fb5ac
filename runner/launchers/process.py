"""`attached` and `process` launchers."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from agentperf import contract
from runner.launchers.base import (
    Endpoint,
    LauncherError,
    list_models,
    stop_process_group,
    wait_for_models,
)
from runner.launchers.devices import DeviceGrant
from runner.launchers.sandbox import (
    Sandbox,
    extra_read_only_paths,
    launch_variables,
    redact_output,
    redacted_log,
)
from runner.launchers.sections import WrittenAttached, WrittenProcess, read_section

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
LOG_TAIL_BYTES = 4000


class AttachedLauncher:
    """An endpoint that is already running; the URL came from the pool's allowlist."""

    kind = "attached"

    def __init__(self, section: contract.AttachedLauncher | Mapping[str, Any]) -> None:
        self.section = read_section(contract.AttachedLauncher, WrittenAttached, section)
        self.devices: DeviceGrant | None = None  # nothing is launched here

    def start(self) -> Endpoint:
        url = self.section.url
        if not url:
            raise LauncherError(
                f"endpoint {self.section.endpoint_id!r} has no URL in the pool allowlist"
            )
        api_key = None
        key_env = self.section.api_key_env
        if key_env:
            api_key = os.environ.get(key_env)
        try:
            models = list_models(url, timeout_s=15.0, api_key=api_key)
        except Exception as exc:
            raise LauncherError(f"attached endpoint {url} is not reachable: {exc}") from exc
        return Endpoint(
            served_model_name=self.section.served_model_name,
            base_url=url,
            api_key=api_key,
            info={
                "launcher": "attached",
                "endpoint_id": self.section.endpoint_id,
                "models": models,
            },
        )

    def stop(self) -> None:
        return None

    def log_bytes(self) -> bytes:
        return b""

    def check(self) -> None:
        """Nothing watched: the endpoint is the pool's."""


def _host_secret(name: str) -> str:
    if name not in os.environ:
        raise LauncherError(f"secret {name} is not set in the runner host's environment")
    return os.environ[name]


def resolve_env(env: Mapping[str, str | contract.SecretRef]) -> dict[str, str]:
    """The launcher's environment: clear values as given, secrets from the host's env."""
    return {
        name: _host_secret(name) if isinstance(value, contract.SecretRef) else value
        for name, value in env.items()
    }


def secret_values(
    env: Mapping[str, str | contract.SecretRef], command: Sequence[str | contract.SecretArg]
) -> list[str]:
    """The host's values of the secrets a launch names (its env's and its command's), which
    its output is redacted of (docs/security.md "Vendor commands")."""
    named = [name for name, value in env.items() if isinstance(value, contract.SecretRef)]
    named += [item.name for item in command if isinstance(item, contract.SecretArg)]
    return [_host_secret(name) for name in named]


def substitute(items: Sequence[str | contract.SecretArg], variables: dict[str, str]) -> list[str]:
    """`${VAR}` replaced from `variables`; an unknown variable is an error, not "".
    A `{secret: true, name: N}` item is the runner host's value of N."""

    def one(item: str | contract.SecretArg) -> str:
        if isinstance(item, contract.SecretArg):
            return _host_secret(item.name)
        text = item

        def repl(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in variables:
                raise LauncherError(
                    f"${{{name}}} in the command is not set: a command may name its declared "
                    "env, PORT and the pool host's RUNNER_LAUNCH_VARS"
                )
            return variables[name]

        return _VAR.sub(repl, text)

    return [one(item) for item in items]


class ProcessLauncher:
    """Start the vendor's command in the sandbox (runner/launchers/sandbox.py), wait for
    `/v1/models` inside it, stop it after. It never runs outside the sandbox."""

    kind = "process"

    def __init__(
        self,
        section: contract.ProcessLauncher | Mapping[str, Any],
        *,
        log_dir: str,
        devices: DeviceGrant | None = None,
    ) -> None:
        self.section = read_section(contract.ProcessLauncher, WrittenProcess, section)
        self.log_path = Path(log_dir) / "launcher.log"
        # the accelerators the pool granted this run (runner/launchers/devices.py); None:
        # none, with the pool's /dev/shm size and memlock limit
        self.devices = devices
        self.process: subprocess.Popen[bytes] | None = None
        self.sandbox: Sandbox | None = None
        self._secrets: list[str] = []
        self._log: IO[bytes] | None = None  # the launch's output, open while it runs
        self._host_paths = sorted(
            {
                str(Path(log_dir).resolve()),
                str(Path.home()),
                tempfile.gettempdir(),
                str(Path(__file__).resolve().parents[2]),
                os.getcwd(),
            }
        )

    def _tail(self) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return self.redact(data[-LOG_TAIL_BYTES:].decode(errors="replace"))

    def redact(self, text: str) -> str:
        """What the vendor may see of the process's output (capped, no secrets, no paths)."""
        return redact_output(text, secrets=self._secrets, paths=self._host_paths)

    def start(self) -> Endpoint:
        section = self.section
        port = section.port
        env = resolve_env(section.env)
        launch_vars = launch_variables()
        variables = {**launch_vars, **env, "PORT": str(port)}
        command = substitute(section.command, variables)
        self._secrets = secret_values(section.env, section.command)
        files = [v for v in launch_vars.values() if os.path.isabs(v) and os.path.exists(v)]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self._log = log
        self.sandbox = Sandbox(
            work_dir=str(self.log_path.parent / "sandbox"),
            env={**env, "PORT": str(port)},
            read_only=[*files, *extra_read_only_paths()],
            devices=self.devices,
        )
        try:
            self.process = self.sandbox.start(command, log=log)
        except LauncherError:
            log.close()
            raise
        base_url = f"http://127.0.0.1:{port}/v1"
        started = time.monotonic()
        models = wait_for_models(
            base_url,
            timeout_s=float(section.ready_timeout_s),
            process=self.process,
            log_tail=self._tail,
            connect=self.sandbox.connect,
        )
        return Endpoint(
            served_model_name=section.served_model_name,
            base_url=base_url,
            connect=self.sandbox.connect,
            info={
                "launcher": "process",
                "sandbox": "bubblewrap",
                "command": command[:1],
                "pid": self.process.pid,
                "ready_after_s": round(time.monotonic() - started, 3),
                "models": models,
                # for the inventory (runner/worker/host_inventory.py): no image, the host's program
                "runtime": {
                    "entrypoint": command[:1],
                    "user": f"{self.sandbox.uid}:{self.sandbox.gid}",
                },
            },
        )

    def stop(self) -> None:
        if self.process is not None:
            stop_process_group(self.process)
        if self.sandbox is not None:
            self.sandbox.stop()
        if self._log is not None and not self._log.closed:
            self._log.close()

    def log_bytes(self) -> bytes:
        """The process's output as stored for the run (vendors read it): redacted too."""
        return redacted_log(self.log_path, secrets=self._secrets, paths=self._host_paths)

    def check(self) -> None:
        """Nothing watched between trials: a server that died fails the next requests."""
