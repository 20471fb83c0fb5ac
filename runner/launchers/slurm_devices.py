"""The GPUs Slurm allocated one task, as the devices its container is given (DB-free;
docs/pipeline.md "Slurm", "GPUs").

Slurm allocates a task its GPUs by index (`--gpus-per-task`; the step's
``SLURM_STEP_GPUS``): index *i* is the *i*-th GPU of the node's ``gres.conf`` (``Name=gpu
File=/dev/nvidia[0-7]``, files expanded in the order written). A `podman` task is given
exactly those: each allocated index becomes its device node (``--device``), or the CDI name
the pool declares for it, and nothing else of the node's GPUs; the control nodes every GPU
needs (``/dev/nvidiactl``, ``/dev/nvidia-uvm`` …) come as for the single-host launchers
(runner/launchers/devices.py).

Where the devices come from, per node:

- ``RUNNER_SLURM_GPUS`` (the pool host's, passed in the job document): comma-separated
  entries by Slurm GPU index, written as ``RUNNER_DEVICES`` entries (a CDI name such as
  ``nvidia.com/gpu=0``, or device nodes); for pools whose gres.conf is not readable on the
  nodes (configless Slurm) or that hand out GPUs by CDI.
- else the node's ``gres.conf``, beside ``SLURM_CONF``. A ``File`` under ``/dev`` appears at
  the same path inside the container; one elsewhere (a stand-in node, as the tests use)
  appears at ``/dev/<its name>``.

A task whose component asked for GPUs and that Slurm gave none, or whose indices name no
device, does not start: it fails naming the index and where it looked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from runner.launchers.base import LauncherError
from runner.launchers.devices import (
    AMD_SHARED,
    DEFAULT_CDI_DIRS,
    DEFAULT_SHM_BYTES,
    NVIDIA_SHARED,
    Accelerator,
    DeviceGrant,
    Node,
    _minor,
    _vendor,
    host_memlock,
    parse_entry,
    parse_size,
)
from runner.launchers.slurm_cluster import expand_hostlist

ENV_SLURM_GPUS = "RUNNER_SLURM_GPUS"


def gres_gpu_files(text: str, node: str) -> list[str]:
    """The GPU files of ``node`` in a gres.conf, in Slurm's index order: the ``Name=gpu``
    lines that name the node (or no node), their ``File`` lists expanded in order."""
    files: list[str] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields: dict[str, str] = {}
        for token in line.split():
            key, sep, value = token.partition("=")
            if sep:
                fields[key.lower()] = value
        if fields.get("name") != "gpu" or "file" not in fields:
            continue
        nodes = fields.get("nodename")
        if nodes is not None and node not in expand_hostlist(nodes):
            continue
        files += expand_hostlist(fields["file"])
    return files


def allocated(env: Mapping[str, str]) -> list[int]:
    """The step's GPU indices (``SLURM_STEP_GPUS``), as Slurm wrote them."""
    raw = (env.get("SLURM_STEP_GPUS") or "").strip()
    indices: list[int] = []
    for item in (i.strip() for i in raw.split(",") if i.strip()):
        if not item.isdigit():
            raise LauncherError(f"SLURM_STEP_GPUS={raw!r}: {item!r} is not a GPU index")
        indices.append(int(item))
    return indices


def node_accelerators(
    env: Mapping[str, str], node: str, declared: str | None, cdi_dirs: Sequence[str]
) -> tuple[list[Accelerator], str]:
    """The node's GPUs by Slurm index, and where they were read (for a refusal's text)."""
    if declared:
        entries = [e for e in declared.split(",") if e.strip()]
        return [parse_entry(e, cdi_dirs) for e in entries], ENV_SLURM_GPUS
    conf = Path(env.get("SLURM_CONF") or "/etc/slurm/slurm.conf").parent / "gres.conf"
    try:
        text = conf.read_text()
    except OSError as exc:
        raise LauncherError(
            f"Slurm allocated GPUs but {conf} is unreadable on node {node} ({exc}); "
            f"declare them in {ENV_SLURM_GPUS}"
        ) from exc
    accelerators = []
    for path in gres_gpu_files(text, node):
        inside = path if path.startswith("/dev/") else f"/dev/{Path(path).name}"
        nodes: tuple[Node, ...] = ((path, inside),)
        accelerators.append(
            Accelerator(entry=path, vendor=_vendor(inside), nodes=nodes, minor=_minor(nodes))
        )
    return accelerators, str(conf)


def task_grant(
    env: Mapping[str, str],
    node: str,
    *,
    wanted: int,
    declared: str | None = None,
    shared: str | None = None,
    shm_size: str | None = None,
    memlock: str | None = None,
) -> DeviceGrant:
    """The devices of this task: exactly the GPUs of ``SLURM_STEP_GPUS``.

    ``wanted``: the component's GPUs per task (0: a CPU task, which gets none); ``declared``
    (``RUNNER_SLURM_GPUS``), ``shared`` (``RUNNER_SHARED_DEVICES``), ``shm_size`` and
    ``memlock`` (``RUNNER_SHM_SIZE``, ``RUNNER_MEMLOCK``): the pool host's, from the job
    document; the control nodes default to the vendor's that exist on this node."""
    indices = allocated(env) if wanted else []
    if wanted and len(indices) != wanted:
        raise LauncherError(
            f"the task asked for {wanted} GPU(s) (--gpus-per-task) and Slurm allocated "
            f"{len(indices)} (SLURM_STEP_GPUS={env.get('SLURM_STEP_GPUS', '')!r}) on {node}"
        )
    cdi_dirs = tuple(
        d for d in (env.get("RUNNER_CDI_SPEC_DIRS") or ":".join(DEFAULT_CDI_DIRS)).split(":") if d
    )
    chosen: list[Accelerator] = []
    if indices:
        gpus, source = node_accelerators(env, node, declared, cdi_dirs)
        for index in indices:
            if index >= len(gpus):
                raise LauncherError(
                    f"Slurm allocated GPU {index} on {node}, and {source} lists "
                    f"{len(gpus)} GPU(s) for that node"
                )
            chosen.append(gpus[index])
    if shared is not None:
        shared_nodes = tuple((p.strip(), p.strip()) for p in shared.split(",") if p.strip())
    else:
        vendors = {acc.vendor for acc in chosen if acc.cdi is None}
        defaults = (NVIDIA_SHARED if "nvidia" in vendors else ()) + (
            AMD_SHARED if "amd" in vendors else ()
        )
        shared_nodes = tuple((p, p) for p in defaults if os.path.exists(p))
    return DeviceGrant(
        workers=(tuple(chosen),) if chosen else (),
        shared=shared_nodes,
        shm_bytes=(parse_size("RUNNER_SHM_SIZE", shm_size) or 0) if shm_size else DEFAULT_SHM_BYTES,
        memlock_bytes=(
            parse_size("RUNNER_MEMLOCK", memlock, unlimited=True) if memlock else host_memlock()
        ),
    )
