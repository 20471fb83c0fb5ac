"""Launchers: how a run reaches the deployment under test (no database access).

- `attached`: an endpoint that already runs next to the hardware, taken from the pool's
  allowlist at dispatch;
- `container`: the config's `launch` run in its image (`engine.image`, pulled by digest)
  with Podman, isolated as docs/security.md "Container launcher" says; the default where
  the pool host has a container runtime;
- `process`: the config's `launch` run on the pool host in the bubblewrap sandbox, for
  hosts without a container runtime (the image is not run, and the result says so);
- `slurm`: the topology as one heterogeneous Slurm job on the pool's cluster, measured at
  its frontend (docs/pipeline.md "Slurm");
- `simulated`: the platform's simulated serving system, as a real-time HTTP server for
  small profiles or in process on virtual time for rack-scale ones.

`launcher_for(spec)` picks one from the run spec's `launcher` section.
"""

from __future__ import annotations

from typing import Any

from runner.launchers.base import Endpoint, Launcher, LauncherError
from runner.launchers.container import ContainerLauncher
from runner.launchers.process import AttachedLauncher, ProcessLauncher
from runner.launchers.simulated import SimulatedLauncher
from runner.launchers.slurm import SlurmLauncher

__all__ = ["Endpoint", "Launcher", "LauncherError", "launcher_for"]


def launcher_for(
    launcher: dict[str, Any], *, log_dir: str, run_id: int | str | None = None
) -> Launcher:
    kind = launcher.get("kind")
    if kind == "attached":
        return AttachedLauncher(launcher)
    if kind == "container":
        return ContainerLauncher(launcher, log_dir=log_dir, run_id=run_id)
    if kind == "process":
        return ProcessLauncher(launcher, log_dir=log_dir)
    if kind == "slurm":
        return SlurmLauncher(launcher, log_dir=log_dir, run_id=run_id)
    if kind == "simulated":
        return SimulatedLauncher(launcher, log_dir=log_dir)
    raise LauncherError(f"unknown launcher kind {kind!r}")
