"""What the launcher says about the endpoint it served (runner/launchers/ ``Endpoint.info``,
docs/pipeline.md "The pool worker"), stored in ``RunnerInfo.endpoint``; for a Slurm launch,
the job's layout the result page shows (docs/pipeline.md "Slurm")."""

from __future__ import annotations

from typing import Literal

from agentperf.documents.rules import Contract, Count
from agentperf.inventory import AcceleratorRecord, Inventory, MachineRecord


class SlurmRoleLayout(Contract):
    """One component of the heterogeneous job (runner/launchers/slurm.py ``plan``)."""

    role: str  # "frontend" or the topology's role name
    nodes: Count
    tasks: Count
    gpus_per_task: Count


class UnreadInventory(Contract):
    """A node whose inventory could not be collected: the machine alone and why
    (runner/launchers/slurm_task.py ``machine_inventory``)."""

    tool: Literal["none"]
    reason: str
    accelerators: list[AcceleratorRecord]
    machine: MachineRecord


class SlurmNode(Contract):
    """A node of the job: the GPUs its tasks were given, its roles and its inventory."""

    node: str
    gpus: Count
    roles: list[str]
    inventory: Inventory | UnreadInventory | None


class GrantedAccelerator(Contract):
    """One accelerator a task's container was given (runner/launchers/devices.py)."""

    entry: str
    vendor: str  # "nvidia", "amd" or "other"
    nodes: list[str]
    cdi: str | None
    minor: int | None


class DeviceGrantInfo(Contract):
    """What a task's container was given: exactly Slurm's allocation
    (runner/launchers/devices.py ``DeviceGrant.describe``)."""

    workers: list[list[GrantedAccelerator]]
    shared: list[str]
    shm_bytes: int
    memlock_bytes: int | None  # None: unlimited


class SlurmTaskState(Contract):
    """One task of the job as it last wrote its state (runner/launchers/slurm_task.py)."""

    role: str
    rank: Count
    node: str
    gpus: Count
    devices: DeviceGrantInfo | None  # None: not run in a container (the `host` runtime)
    state: str
    exit_code: int | None


class AcceleratorsGiven(Contract):
    """The accelerators the tasks were given against the config's ``accelerators_used``."""

    used: int | None
    given: Count


class SlurmLayout(Contract):
    """``Endpoint.slurm``: the job's roles, nodes and task states (runner/launchers/slurm.py
    ``SlurmLauncher.layout``)."""

    job_id: str | None
    job_name: str
    partition: str | None  # None: the partition Slurm marks default
    runtime: str  # podman, pyxis or host
    router: str | None  # "nginx": the pool's router as the frontend
    roles: list[SlurmRoleLayout]
    nodes: list[SlurmNode]
    tasks: list[SlurmTaskState]
    accelerators: AcceleratorsGiven


class Endpoint(Contract):
    """What the launcher says about the served endpoint (runner/launchers/ ``Endpoint.info``
    without its model list; docs/pipeline.md "The pool worker")."""

    launcher: Literal["attached", "container", "process", "simulated", "slurm"]
    endpoint_id: str | None = None  # attached
    profile: str | None = None  # simulated
    clock: Literal["real", "virtual"] | None = None  # simulated
    sandbox: str | None = None  # process (bubblewrap), container (podman)
    command: list[str] | None = None  # process, container: the executable only
    pid: int | None = None  # process, container
    ready_after_s: float | None = None  # process, container
    slurm: SlurmLayout | None = None  # slurm: the job's layout (docs/pipeline.md "Slurm")
    image: str | None = None  # container: the image pulled and run, by digest
    pull_s: float | None = None  # container: time to pull the image
