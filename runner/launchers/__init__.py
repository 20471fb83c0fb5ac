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

`launcher_for(section)` picks one for the run spec's typed `launcher` section
(runner/launchers/sections.py).
"""

from __future__ import annotations

from agentperf import contract
from runner.launchers.base import Endpoint, Launcher, LauncherError
from runner.launchers.container import ContainerLauncher
from runner.launchers.process import AttachedLauncher, ProcessLauncher
from runner.launchers.simulated import SimulatedLauncher
from runner.launchers.slurm import SlurmLauncher

__all__ = ["Endpoint", "Launcher", "LauncherError", "launcher_for"]


def launcher_for(
    section: contract.Launcher,
    *,
    log_dir: str,
    run_id: int | str | None = None,
    hard_s: int | None = None,
) -> Launcher:
    """The launcher of the run spec's typed `launcher` section (each takes its own model);
    `hard_s`: the run's hard time limit, the most a container may run."""
    if isinstance(section, contract.AttachedLauncher):
        return AttachedLauncher(section)
    if isinstance(section, contract.ContainerLauncher):
        return ContainerLauncher(section, log_dir=log_dir, run_id=run_id, hard_s=hard_s)
    if isinstance(section, contract.ProcessLauncher):
        return ProcessLauncher(section, log_dir=log_dir)
    if isinstance(section, contract.SlurmLauncher):
        return SlurmLauncher(section, log_dir=log_dir, run_id=run_id)
    if isinstance(section, contract.SimulatedLauncher):
        return SimulatedLauncher(section, log_dir=log_dir)
    raise LauncherError(f"unknown launcher section {type(section).__name__}")
