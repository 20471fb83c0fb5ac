"""The Slurm job of a launch (docs/pipeline.md "Slurm"): its components (`plan`: component 0
the frontend, then one per role of the topology, with its nodes and GPUs per task), its sbatch
script (`render_script`), what it takes from the runner's environment (`export_names`), and
the check that its tasks' accelerators add up to the config's (`verify_layout`).

`render_config` renders the job of a deployment config outside the platform
(`python -m runner.launchers.slurm render`), the same job the launcher submits.
"""

from __future__ import annotations

import math
import os
import random
import shlex
import socket
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentperf import contract
from agentperf.launchspec import launcher_section
from runner.launchers.base import LauncherError
from runner.launchers.slurm_cluster import lease_s, partition_capacity

PORT_STRIDE = 100  # ports per heterogeneous component: base + 100 × component + rank
REPO_ROOT = Path(__file__).resolve().parents[2]

# what sbatch passes from the runner's environment into the job besides SLURM_* (the
# job's --export list; never the worker's whole environment, which holds its credentials):
# where Slurm, Python and Podman are, plus the launch variables and the config's secrets
EXPORT_NAMES = (
    "PATH",
    "SLURM_CONF",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    "RUNNER_LAUNCH_VARS",
)


def secret_names(components: list[dict[str, Any]]) -> list[str]:
    """The secrets the components declare (env `{secret: true}`, command `{secret: true,
    name}`): runner-host variables of the same name."""
    names: list[str] = []
    for c in components:
        names += [str(k) for k, v in (c.get("env") or {}).items() if isinstance(v, dict)]
        names += [
            str(item.get("name"))
            for item in c.get("command") or []
            if isinstance(item, dict) and item.get("secret") is True
        ]
    return names


def export_names(components: list[dict[str, Any]]) -> list[str]:
    """The job's `--export` names: EXPORT_NAMES, `RUNNER_LAUNCH_VARS`' names and the
    components' secrets, those set here only."""
    names = list(EXPORT_NAMES)
    names += [n.strip() for n in os.environ.get("RUNNER_LAUNCH_VARS", "").split(",")]
    names += secret_names(components)
    return [n for n in dict.fromkeys(names) if n and n in os.environ]


def component_shape(workers: int, per_worker: int, gpus_per_node: int) -> dict[str, int]:
    """Nodes, tasks and GPUs per task of one role: a worker within a node is one task with
    `per_worker` GPUs, tasks packed `gpus_per_node // per_worker` to a node; a worker wider
    than a node is one task per node over `per_worker / gpus_per_node` whole nodes."""
    if gpus_per_node <= 0:
        raise ValueError("the partition's nodes have no GPUs")
    if per_worker <= gpus_per_node:
        per_node = gpus_per_node // per_worker
        nodes = math.ceil(workers / per_node)
        return {
            "nodes": nodes,
            "tasks": workers,
            "gpus_per_task": per_worker,
            "tasks_per_node": min(per_node, workers),
            "nodes_per_worker": 1,
        }
    if per_worker % gpus_per_node:
        raise ValueError(
            f"{per_worker} accelerators per worker is not a whole number of "
            f"{gpus_per_node}-GPU nodes"
        )
    span = per_worker // gpus_per_node
    return {
        "nodes": workers * span,
        "tasks": workers * span,
        "gpus_per_task": gpus_per_node,
        "tasks_per_node": 1,
        "nodes_per_worker": span,
    }


def task_document(task: contract.SlurmTask | None) -> dict[str, Any]:
    """A task's command and env as the job document carries them to the nodes (JSON: a
    secret as ``{secret: true, name}`` in the command, ``{secret: true}`` in the env); no
    task (the pool's router): no command."""
    if task is None:
        return {"command": None, "env": {}}
    return task.model_dump(mode="json", include={"command", "env"})


def _where(capacity: dict[str, Any]) -> str:
    """The partition's shape, as a refusal names it."""
    nodes = capacity["nodes"]
    gpu_nodes = [n for n in nodes if n["gpus"] > 0]
    gpus_per_node = min((n["gpus"] for n in gpu_nodes), default=0)
    without = len(nodes) - len(gpu_nodes)
    return f"partition {capacity['partition']!r} ({len(gpu_nodes)} nodes × {gpus_per_node} GPUs" + (
        f" + {without} without GPUs)" if without else ")"
    )


def plan(section: contract.SlurmLauncher, capacity: dict[str, Any]) -> list[dict[str, Any]]:
    """The job's components (0: the frontend), refused with the config field to fix when
    the partition cannot hold the topology."""
    nodes = capacity["nodes"]
    gpu_nodes = [n for n in nodes if n["gpus"] > 0]
    gpus_per_node = min((n["gpus"] for n in gpu_nodes), default=0)
    where = _where(capacity)
    components: list[dict[str, Any]] = [
        {
            "group": 0,
            "role": "frontend",
            "nodes": 1,
            "tasks": 1,
            "gpus_per_task": 0,
            "tasks_per_node": 1,
            "router": None if section.frontend else "nginx",
            **task_document(section.frontend),
            "serving": False,
        }
    ]
    total_nodes, worker_nodes = 1, 0
    for i, role in enumerate(section.roles):
        per_worker = role.accelerators_per_worker
        if per_worker > gpus_per_node and (gpus_per_node == 0 or per_worker % gpus_per_node):
            raise LauncherError(
                f"topology.roles.{i}.accelerators_per_worker: {per_worker} GPUs per worker do "
                f"not fit {where}"
            )
        shape = component_shape(role.workers, per_worker, gpus_per_node)
        total_nodes += shape["nodes"]
        worker_nodes += shape["nodes"]
        components.append(
            {
                "group": i + 1,
                "role": role.name,
                **shape,
                "router": None,
                **task_document(role),
                "serving": True,
                # a serving task is ready when it answers this (a loading server answers 503)
                "ready_path": section.ready_path or "/health",
            }
        )
        if total_nodes > len(nodes) or worker_nodes > len(gpu_nodes):
            raise LauncherError(
                f"topology.roles.{i}.workers: {role.workers} × {per_worker} GPUs need "
                f"{shape['nodes']} nodes; with the frontend the job needs {total_nodes}, more "
                f"than {where}"
            )
    return components


def render_script(
    *,
    job_name: str,
    job_dir: str,
    components: list[dict[str, Any]],
    time_limit_min: int,
    partition: str | None,
    account: str | None = None,
    python: str = sys.executable,
    runtime: str = "host",
    image: str | None = None,
    frontend_constraint: str | None = None,
    export: list[str] | None = None,
) -> str:
    """The sbatch script: one `#SBATCH` block per component (separated by `hetjob`), one
    `srun --het-group` per component, and a watchdog that ends the job when the runner's
    lease goes stale. With runtime `pyxis`, srun runs each task in the image itself
    (`--container-image`); with `podman` the task wrapper runs it."""
    q = shlex.quote
    head = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --time={time_limit_min}",
        f"#SBATCH --output={job_dir}/logs/job-%j.out",
        f"#SBATCH --comment=agentperf:{job_dir}",
        "#SBATCH --no-requeue",  # a node that drops fails the run; nothing restarts unseen
    ]
    if export:  # SLURM_* and these only (sbatch's default is the runner's whole environment)
        head.append(f"#SBATCH --export={','.join(export)}")
    if partition:
        head.append(f"#SBATCH --partition={partition}")
    if account:
        head.append(f"#SBATCH --account={account}")
    for c in components:
        if c["group"] > 0:
            head.append("#SBATCH hetjob")
        line = f"#SBATCH --nodes={c['nodes']} --ntasks={c['tasks']}"
        line += f" --ntasks-per-node={c['tasks_per_node']}"
        if c["group"] == 0 and frontend_constraint:
            line += f" --constraint={frontend_constraint}"
        if c["gpus_per_task"]:
            line += f" --gpus-per-task={c['gpus_per_task']}"
        head.append(line + f"  # {c['role']}")
    body = [
        "",
        "set -u",
        # the steps get the job's environment (already only the --export names + SLURM_*)
        "export SLURM_EXPORT_ENV=ALL",
        f"export PYTHONPATH={q(str(REPO_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}",
        f"lease={q(job_dir)}/lease",
    ]
    for c in components:
        srun = f"srun --het-group={c['group']} --kill-on-bad-exit=1 --label"
        if runtime == "pyxis" and c["router"] is None and image:
            # pyxis/enroot: srun starts the task in the image; the runner's code and the job
            # folder are mounted read-only / read-write at the same paths
            srun += (
                f" --container-image={q(image)} --container-writable --no-container-mount-home"
                f" --container-mounts={q(str(REPO_ROOT))}:{q(str(REPO_ROOT))}:ro,"
                f"{q(job_dir)}:{q(job_dir)}"
            )
        body.append(
            f"{srun} {q(python)} -m runner.launchers.slurm_task --job-dir {q(job_dir)} "
            f"--group {c['group']} &"
        )
    body += [
        f'( while sleep 5; do age=$(( $(date +%s) - $(stat -c %Y "$lease") )); '
        f'if [ "$age" -gt {lease_s()} ]; then echo "runner lease stale ($age s)"; exit 3; fi; '
        "done ) &",
        "wait -n",
        "rc=$?",
        'echo "a task or the lease ended (status $rc): ending the job"',
        "exit $rc",
    ]
    return "\n".join(head + body) + "\n"


def free_port_base(components: int) -> int:
    """A port base whose ports (100 per component) look free on this host."""
    rng = random.Random()
    for _ in range(100):
        base = rng.randrange(30000, 50000, 1000)
        probes = [base + PORT_STRIDE * g + r for g in range(components) for r in range(4)]
        if all(_port_free(p) for p in probes):
            return base
    raise LauncherError("no free port range for the job's tasks")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def verify_layout(layout: dict[str, Any], accelerators_used: int) -> dict[str, Any]:
    """The check that the roles' accelerators add up to `accelerators_used`: what Slurm
    gave the tasks (their GPU lists) against the config (docs/pipeline.md "Slurm")."""
    given = int(layout.get("accelerators", {}).get("given") or 0)
    ok = given == accelerators_used
    return {
        "name": "slurm_accelerators",
        "status": "pass" if ok else "fail",
        "summary": (
            f"the job's tasks hold {given} accelerators; the config uses {accelerators_used}"
        ),
        "evidence": {"per_task": layout.get("tasks"), "given": given, "used": accelerators_used},
    }


def render_config(
    config: dict[str, Any],
    *,
    job_name: str,
    job_dir: str,
    runtime: str = "pyxis",
    frontend_constraint: str | None = None,
) -> str:
    """The sbatch script the launcher would submit for `config` on the cluster SLURM_CONF
    names (its partition's shape from `sinfo --json`); LauncherError naming the field when
    the partition cannot hold the topology."""
    try:
        section = contract.SlurmLauncher.model_validate(launcher_section(config))
    except ValidationError as exc:
        raise LauncherError(f"the config's slurm launch: {contract.error_fields(exc)}") from None
    partition = os.environ.get("RUNNER_SLURM_PARTITION") or None
    components = plan(section, partition_capacity(partition))
    return render_script(
        job_name=job_name,
        job_dir=job_dir,
        components=components,
        time_limit_min=max(1, math.ceil(section.time_limit_s / 60)),
        partition=partition,
        python="python3",
        runtime=runtime,
        image=section.image,
        frontend_constraint=frontend_constraint,
    )
