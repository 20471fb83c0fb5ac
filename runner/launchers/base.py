"""What every launcher provides: start → an endpoint, stop, and its captured log."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agentperf.httpget import HTTP_GET_MAX_BYTES, Connect, ResponseTooLarge
from agentperf.httpget import http_get as _http_get

if TYPE_CHECKING:  # devices.py raises this module's LauncherError
    from runner.launchers.devices import DeviceGrant


class LauncherError(Exception):
    """The deployment could not be started or reached; the message says why."""


@dataclass(slots=True)
class Endpoint:
    """Where the engine sends requests: an HTTP base URL, or a simulated profile in process."""

    served_model_name: str
    base_url: str | None = None
    sim_profile: str | None = None
    seed: int = 0
    api_key: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    # How to open a TCP connection to base_url's host and port when it is not the host's own
    # network: a sandboxed server's loopback (runner/launchers/sandbox.py). None: plain TCP.
    connect: Connect | None = None
    # The servers whose /metrics add up to the deployment's counters when base_url is a
    # router or frontend in front of several of them (each root URL; docs/metrics.md "Cache
    # truth"). Empty: base_url's own /metrics.
    metrics_urls: tuple[str, ...] = ()

    @property
    def virtual(self) -> bool:
        return self.sim_profile is not None


def http_get(
    url: str,
    *,
    timeout_s: float,
    headers: dict[str, str] | None = None,
    connect: Connect | None = None,
    max_bytes: int = HTTP_GET_MAX_BYTES,
) -> bytes:
    """agentperf.httpget.http_get, with a body over `max_bytes` a LauncherError (the served
    process is the vendor's)."""
    try:
        return _http_get(
            url, timeout_s=timeout_s, headers=headers, connect=connect, max_bytes=max_bytes
        )
    except ResponseTooLarge as exc:
        raise LauncherError(str(exc)) from exc


class Launcher(Protocol):
    """What the run director drives (runner/worker/director.py types against it, and
    nothing else: no attribute is probed)."""

    kind: str
    # The accelerators the pool granted this run (runner/launchers/devices.py): the director
    # sets it before `start` for a launcher that starts a server on this host
    # (LAUNCHES_SERVER); None for the others, and where the pool declares no devices.
    devices: DeviceGrant | None

    def start(self) -> Endpoint: ...

    def stop(self) -> None: ...

    def log_bytes(self) -> bytes: ...

    def check(self) -> None:
        """Raise LauncherError when the deployment it watches has ended (a Slurm task died,
        the job left the queue); the director calls it between trials. Nothing where it
        watches none."""
        ...


# The kinds that start a server on the pool host itself, with the accelerators it is granted.
LAUNCHES_SERVER = ("process", "container")


def die_with_parent() -> None:
    """In the child: get SIGKILL when the worker dies, so no orphan server keeps the port."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: the reaper's retry will find the port busy and say so
        pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def list_models(
    base_url: str,
    *,
    timeout_s: float = 5.0,
    api_key: str | None = None,
    connect: Connect | None = None,
) -> list[str]:
    """Model ids served at `base_url` (`GET <base>/v1/models`)."""
    url = base_url.rstrip("/")
    url = url + "/models" if url.endswith("/v1") else url + "/v1/models"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = json.loads(http_get(url, timeout_s=timeout_s, headers=headers, connect=connect))
    return [str(item.get("id")) for item in body.get("data") or [] if isinstance(item, dict)]


def wait_for_models(
    base_url: str,
    *,
    timeout_s: float,
    process: subprocess.Popen[bytes] | None = None,
    log_tail: Any = None,
    connect: Connect | None = None,
) -> list[str]:
    """Poll `/v1/models` until it answers; fail early when the process died."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            tail = log_tail() if log_tail else ""
            raise LauncherError(
                f"the server exited with status {process.returncode} before answering "
                f"/v1/models; last log lines:\n{tail}"
            )
        try:
            return list_models(base_url, timeout_s=5.0, connect=connect)
        except (
            urllib.error.URLError,
            ConnectionError,
            TimeoutError,
            ValueError,
            OSError,
            http.client.HTTPException,
        ) as exc:
            last = str(exc)
        time.sleep(0.2)
    raise LauncherError(f"{base_url} did not answer /v1/models within {timeout_s:g} s ({last})")


def stop_process_group(process: subprocess.Popen[bytes], *, grace_s: float = 15.0) -> None:
    """SIGTERM the process group, then SIGKILL after `grace_s`."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=30)
