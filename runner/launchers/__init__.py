"""Launchers: how a run reaches the deployment under test (no database access).

- `attached`: an endpoint that already runs next to the hardware, taken from the pool's
  allowlist at dispatch;
- `process`: a command the worker starts, waits for (`/v1/models`), logs and stops;
- `simulated`: the platform's simulated serving system, as a real-time HTTP server for
  small profiles or in process on virtual time for rack-scale ones.

`launcher_for(spec)` picks one from the run spec's `launcher` section.
"""

from __future__ import annotations

from typing import Any

from runner.launchers.base import Endpoint, Launcher, LauncherError
from runner.launchers.process import AttachedLauncher, ProcessLauncher
from runner.launchers.simulated import SimulatedLauncher

__all__ = ["Endpoint", "Launcher", "LauncherError", "launcher_for"]


def launcher_for(launcher: dict[str, Any], *, log_dir: str) -> Launcher:
    kind = launcher.get("kind")
    if kind == "attached":
        return AttachedLauncher(launcher)
    if kind == "process":
        return ProcessLauncher(launcher, log_dir=log_dir)
    if kind == "simulated":
        return SimulatedLauncher(launcher, log_dir=log_dir)
    raise LauncherError(f"unknown launcher kind {kind!r}")
