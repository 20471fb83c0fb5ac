"""The `slurm` launcher: a topology that spans nodes, launched as one Slurm job
(docs/pipeline.md "Slurm").

Every role of the config's topology (`topology.roles`: workers × accelerators per worker)
becomes one component of a heterogeneous job, with its node count and GPUs per task;
component 0 is the frontend that serves the OpenAI API: the config's declared frontend, or
the pool's router (Debian nginx, round-robin over the serving role's tasks). The job is
named after the run, has a time limit, and ends when any task ends, when the runner's lease
goes stale (a dead worker), at the time limit, or at `scancel`.

The runner talks to Slurm through its commands (`sbatch`, `squeue --json`, `sinfo --json`,
`scancel`), never through a library binding: the commands are what every Slurm site has,
they speak to the controller with the site's own authentication (munge), and `--json`
(Slurm ≥ 21.08) gives a parsed document. pyslurm is tied to one Slurm release per build.
`sacct` needs slurmdbd, which many clusters (and the test cluster) do not run: task exit
states come from the tasks' own state files in the job folder (a filesystem every node and
the runner share, `RUNNER_SLURM_SHARED_DIR`).

The pool host's settings (environment): `SLURM_CONF`, `RUNNER_SLURM_PARTITION` (default: the
partition Slurm marks default), `RUNNER_SLURM_SHARED_DIR`, `RUNNER_SLURM_RUNTIME` (`podman`, the
default; `pyxis`; `host` on a vendor's own pool only, `RUNNER_POOL_OPERATED_BY=vendor`),
`RUNNER_SLURM_GPUS` (each task's GPUs by Slurm index, else each node's gres.conf:
runner/launchers/slurm_devices.py), `RUNNER_SLURM_PORT_BASE`, `RUNNER_SLURM_ACCOUNT`.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from agentperf.launchspec import launcher_section
from runner.launchers.base import Endpoint, LauncherError, wait_for_models
from runner.launchers.devices import DeviceGrant

JOB_PREFIX = "agentperf-run-"
PORT_STRIDE = 100  # ports per heterogeneous component: base + 100 × component + rank
LEASE_S = 60  # the job ends when the runner has not renewed its lease for this long
RUNTIMES = ("podman", "pyxis", "host")


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list (`node[1-3,5],gpu07`) as names, in order."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text):
        match = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if not match:
            names.append(part)
            continue
        prefix, ranges, suffix = match.groups()
        for item in ranges.split(","):
            low, _, high = item.partition("-")
            if not high:
                names.append(f"{prefix}{low}{suffix}")
                continue
            width = len(low)
            names += [f"{prefix}{i:0{width}d}{suffix}" for i in range(int(low), int(high) + 1)]
    return names


def pool_operated_by() -> str:
    """`RUNNER_POOL_OPERATED_BY`: `platform` (the default) or `vendor` (a vendor's own
    machines, where only its submissions run; docs/security.md "Vendor commands")."""
    value = os.environ.get("RUNNER_POOL_OPERATED_BY") or "platform"
    if value not in ("platform", "vendor"):
        raise LauncherError(f"RUNNER_POOL_OPERATED_BY={value!r} is not platform or vendor")
    return value


def lease_s() -> int:
    """`RUNNER_SLURM_LEASE_S`, else LEASE_S."""
    return int(os.environ.get("RUNNER_SLURM_LEASE_S") or LEASE_S)


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


ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING"}
# a job Slurm ended, not one of its tasks: reported before the tasks it took down
ENDED_BY_SLURM = {"NODE_FAIL", "TIMEOUT", "CANCELLED", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
REPO_ROOT = Path(__file__).resolve().parents[2]


class SlurmError(LauncherError):
    """Slurm refused or failed; the message says which command and why."""


def slurm(args: list[str], *, timeout: float = 60.0, check: bool = True) -> str:
    """Run one Slurm command; its stdout, or SlurmError with its stderr."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise SlurmError(f"{args[0]} is not installed on this runner host") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{args[0]} took longer than {timeout:g} s") from None
    if check and done.returncode != 0:
        raise SlurmError(f"{' '.join(args[:2])}: {done.stderr.strip()[-800:]}")
    return done.stdout


def jobs(name: str | None = None) -> list[dict[str, Any]]:
    """`squeue --json` (every state Slurm still lists), optionally one job name's."""
    # Slurm 22.05's `squeue --json` ignores --name and --states: filtered here
    listed = json.loads(slurm(["squeue", "--json"])).get("jobs") or []
    return [j for j in listed if name is None or j.get("name") == name]


def active_jobs(name: str) -> list[dict[str, Any]]:
    return [j for j in jobs(name) if str(j.get("job_state")) in ACTIVE]


def cancel(name: str) -> None:
    """`scancel` every job of this name (all components of a heterogeneous job)."""
    slurm(["scancel", "--name", name], check=False)


def partition_capacity(partition: str | None) -> dict[str, Any]:
    """The partition's nodes and GPUs per node (`sinfo --json`), usable nodes only."""
    info = json.loads(slurm(["sinfo", "--json"]))
    nodes = list(info.get("nodes") or [])
    if partition is None:
        parts = [p for p in info.get("partitions") or [] if "default" in str(p.get("flags", ""))]
        partition = str(parts[0]["name"]) if parts else None
    usable = []
    for node in nodes:
        if partition is not None and partition not in (node.get("partitions") or []):
            continue
        state = str(node.get("state", "")).lower()
        if state in ("down", "drained", "draining", "fail", "failing", "unknown", "future"):
            continue
        gres = str(node.get("gres") or "")
        gpus = 0
        for item in gres.split(","):
            parts = item.split("(")[0].split(":")
            if parts and parts[0] == "gpu":
                gpus += int(parts[-1]) if parts[-1].isdigit() else 0
        usable.append({"name": node.get("name"), "address": node.get("address"), "gpus": gpus})
    return {"partition": partition, "nodes": usable}


def node_addresses() -> dict[str, str]:
    """Node name → NodeAddr (where a name does not resolve, e.g. several nodes per host)."""
    info = json.loads(slurm(["sinfo", "--json"]))
    return {
        str(n["name"]): str(n.get("address") or n["name"])
        for n in info.get("nodes") or []
        if n.get("name")
    }


DOWN_STATES = ("down", "fail", "failing")


def down_nodes() -> list[str]:
    """The nodes Slurm has marked down or failed, or that stopped responding (`sinfo --json`):
    when a job ends NODE_FAIL, every component of it does, so these name the node that dropped."""
    info = json.loads(slurm(["sinfo", "--json"]))
    out = []
    for node in info.get("nodes") or []:
        state = str(node.get("state", "")).lower()
        flags = " ".join(str(f) for f in node.get("state_flags") or []).upper()
        if state in DOWN_STATES or "NOT_RESPONDING" in flags:
            out.append(str(node.get("name")))
    return out


def hostnames(nodelist: str) -> list[str]:
    """A Slurm host list (`node[1-3]`) expanded (`scontrol show hostnames`)."""
    if not nodelist:
        return []
    return slurm(["scontrol", "show", "hostnames", nodelist], check=False).split()


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


def plan(launcher: dict[str, Any], capacity: dict[str, Any]) -> list[dict[str, Any]]:
    """The job's components (0: the frontend), refused with the config field to fix when
    the partition cannot hold the topology."""
    nodes = capacity["nodes"]
    gpu_nodes = [n for n in nodes if n["gpus"] > 0]
    gpus_per_node = min((n["gpus"] for n in gpu_nodes), default=0)
    where = (
        f"partition {capacity['partition']!r} ({len(gpu_nodes)} nodes × {gpus_per_node} GPUs"
        + (
            f" + {len(nodes) - len(gpu_nodes)} without GPUs)"
            if len(gpu_nodes) < len(nodes)
            else ")"
        )
    )
    worker_nodes = 0
    frontend = launcher.get("frontend")
    components: list[dict[str, Any]] = [
        {
            "group": 0,
            "role": "frontend",
            "nodes": 1,
            "tasks": 1,
            "gpus_per_task": 0,
            "tasks_per_node": 1,
            "router": None if frontend else "nginx",
            "command": (frontend or {}).get("command"),
            "env": (frontend or {}).get("env") or {},
            "serving": False,
        }
    ]
    total_nodes = 1
    for i, role in enumerate(launcher["roles"]):
        per_worker = int(role["accelerators_per_worker"])
        if per_worker > gpus_per_node and (gpus_per_node == 0 or per_worker % gpus_per_node):
            raise LauncherError(
                f"topology.roles.{i}.accelerators_per_worker: {per_worker} GPUs per worker do "
                f"not fit {where}"
            )
        shape = component_shape(int(role["workers"]), per_worker, gpus_per_node)
        total_nodes += shape["nodes"]
        worker_nodes += shape["nodes"]
        components.append(
            {
                "group": i + 1,
                "role": role["name"],
                **shape,
                "router": None,
                "command": role["command"],
                "env": role.get("env") or {},
                "serving": True,
                # a serving task is ready when it answers this (a loading server answers 503)
                "ready_path": role.get("ready_path") or launcher.get("ready_path") or "/health",
            }
        )
        if total_nodes > len(nodes) or worker_nodes > len(gpu_nodes):
            raise LauncherError(
                f"topology.roles.{i}.workers: {role['workers']} × {per_worker} GPUs need "
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


def _free_port_base(components: int) -> int:
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


def reap_orphans(prefix: str = JOB_PREFIX, *, stale_s: float | None = None) -> list[str]:
    """Cancel this platform's jobs (`prefix` names) whose runner lease is stale: a worker
    that died without its `scancel`. The job's comment names its folder."""
    stale_after = float(stale_s if stale_s is not None else lease_s())
    cancelled = []
    for job in jobs():
        name = str(job.get("name") or "")
        if name in cancelled or not name.startswith(prefix):
            continue
        if str(job.get("job_state")) not in ACTIVE:
            continue
        comment = str(job.get("comment") or "")
        folder = comment.removeprefix("agentperf:") if comment.startswith("agentperf:") else ""
        lease = Path(folder) / "lease" if folder else None
        try:
            age = time.time() - lease.stat().st_mtime if lease else float("inf")
        except OSError:
            age = float("inf")
        if age > stale_after:
            cancel(name)  # every component of the job
            cancelled.append(name)
    return cancelled


class SlurmLauncher:
    """Submit the job, wait for every task and then the frontend's `/v1/models`, watch the
    tasks while the run measures (`check`), `scancel` at the end."""

    kind = "slurm"

    def __init__(
        self, config: dict[str, Any], *, log_dir: str, run_id: int | str | None = None
    ) -> None:
        self.config = config
        self.run_id = str(run_id if run_id is not None else "none")
        self.job_name = f"{JOB_PREFIX}{self.run_id}"
        shared = os.environ.get("RUNNER_SLURM_SHARED_DIR")
        base = Path(shared) / self.job_name if shared else Path(log_dir) / "slurm"
        self.job_dir = base.resolve()
        self.components: list[dict[str, Any]] = []
        # Slurm's own GRES gives the job its GPUs (runner/launchers/slurm_devices.py)
        self.devices: DeviceGrant | None = None
        self.job_id: str | None = None
        self.submitted_at: float | None = None
        self.ready_after_s: float | None = None
        self._stopped = False
        self._renewer: tuple[threading.Event, threading.Thread] | None = None
        self._secrets: list[str] = []

    # -- the pool's settings ------------------------------------------------------------

    @property
    def partition(self) -> str | None:
        return os.environ.get("RUNNER_SLURM_PARTITION") or None

    @property
    def runtime(self) -> str:
        """`RUNNER_SLURM_RUNTIME`: `podman` (the default), `pyxis` or `host`."""
        return os.environ.get("RUNNER_SLURM_RUNTIME") or "podman"

    def check_runtime(self) -> None:
        """Refuse, before anything is queued, a launch the pool's runtime would run
        unisolated: `host` runs the vendor's command bare on the nodes, with every GPU of
        the node, so only a vendor's own pool (`RUNNER_POOL_OPERATED_BY=vendor`) may use it;
        `podman` and `pyxis` need the config's pinned image."""
        runtime = self.runtime
        if runtime not in RUNTIMES:
            raise LauncherError(
                f"RUNNER_SLURM_RUNTIME={runtime!r} is not one of {', '.join(RUNTIMES)}"
            )
        if runtime == "host" and pool_operated_by() != "vendor":
            raise LauncherError(
                "RUNNER_SLURM_RUNTIME=host runs the vendor's command bare on the nodes, with "
                "every GPU of each node: a platform pool runs each task in its pinned image "
                "(podman or pyxis); only a vendor's own pool (RUNNER_POOL_OPERATED_BY=vendor) "
                "may run it on the host"
            )
        if runtime != "host" and not self.config.get("image"):
            raise LauncherError(
                f"engine.image: a Slurm launch runs each task in its pinned image "
                f"(RUNNER_SLURM_RUNTIME={runtime}); the config names none"
            )

    def job_document(self, port_base: int) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "job_name": self.job_name,
            "port_base": port_base,
            "components": self.components,
            "node_addrs": node_addresses(),
            "runtime": self.runtime,
            "image": self.config.get("image"),
        }
        if self.runtime != "host":
            from agentperf.launchspec import allowed_registries
            from runner.launchers.container import parse_image, podman_global_argv
            from runner.launchers.devices import DevicePool
            from runner.launchers.sandbox import extra_read_only_paths

            # refused here, naming engine.image, when not pinned or from a registry the pool
            # does not allow (podman and pyxis alike); each task (podman) or srun (pyxis)
            # pulls it by digest on its node before it runs
            ref, registry = parse_image(str(self.config.get("image") or ""), allowed_registries())
            doc["image"] = str(ref)
        if self.runtime == "podman":
            podman = podman_global_argv()
            tls = ["--tls-verify=false"] if registry.plain_http else []
            doc["podman"] = podman
            doc["pull"] = [*podman, "pull", "--quiet", *tls, str(ref)]
            doc["container_memory"] = os.environ.get("RUNNER_CONTAINER_MEMORY")
            doc["shm_size"] = f"{DevicePool.from_env().shm_bytes}b"  # RUNNER_SHM_SIZE
            doc["read_only_mounts"] = extra_read_only_paths()
            # each task's GPUs (runner/launchers/slurm_devices.py): the pool's declaration by
            # Slurm index (else each node's gres.conf), its control nodes and memlock limit
            doc["slurm_gpus"] = os.environ.get("RUNNER_SLURM_GPUS") or None
            doc["shared_devices"] = os.environ.get("RUNNER_SHARED_DEVICES")
            doc["memlock"] = os.environ.get("RUNNER_MEMLOCK") or None
        return doc

    # -- the launch ---------------------------------------------------------------------

    def renew_lease(self) -> None:
        lease = self.job_dir / "lease"
        lease.touch()
        os.utime(lease)

    def start_renewer(self) -> None:
        """Renew the lease every third of its length from a daemon thread, from before
        sbatch until stop(): a trial (minutes) and start()'s own waits are far longer than
        the lease, and check() runs only between trials."""
        if self._renewer is not None:
            return
        stopping = threading.Event()
        interval = max(0.5, lease_s() / 3)

        def renew() -> None:
            while not stopping.wait(interval):
                try:
                    self.renew_lease()
                except OSError:  # the shared folder hiccuped: the next beat retries
                    pass

        thread = threading.Thread(target=renew, name=f"{self.job_name}-lease", daemon=True)
        thread.start()
        self._renewer = (stopping, thread)

    def stop_renewer(self) -> None:
        """No more renewals (stop(); a test stands for a runner that died this way)."""
        if self._renewer is None:
            return
        stopping, thread = self._renewer
        self._renewer = None
        stopping.set()
        thread.join(timeout=10)

    def start(self) -> Endpoint:
        try:
            return self._start()
        except BaseException:
            self.stop_renewer()  # a failed start leaves the job to its watchdog and stop()
            raise

    def _start(self) -> Endpoint:
        self.check_runtime()
        reap_orphans()
        cancel(self.job_name)  # an earlier attempt's job of this run (a redelivered run)
        components = plan(self.config, partition_capacity(self.partition))
        self.components = components
        for sub in ("tasks", "logs"):
            (self.job_dir / sub).mkdir(parents=True, exist_ok=True)
        for stale in (self.job_dir / "tasks").glob("*.json"):
            stale.unlink()
        port_base = int(
            os.environ.get("RUNNER_SLURM_PORT_BASE") or _free_port_base(len(components))
        )
        job_doc = self.job_document(port_base)
        (self.job_dir / "job.json").write_text(json.dumps(job_doc, indent=1))
        self.renew_lease()
        self.start_renewer()
        self._secrets = [os.environ[n] for n in secret_names(components) if n in os.environ]
        time_limit_min = max(1, math.ceil(int(self.config.get("time_limit_s") or 3600) / 60))
        script = render_script(
            job_name=self.job_name,
            job_dir=str(self.job_dir),
            components=components,
            time_limit_min=time_limit_min,
            partition=self.partition,
            account=os.environ.get("RUNNER_SLURM_ACCOUNT"),
            runtime=self.runtime,
            image=job_doc["image"],  # checked (parse_image) for every runtime but host
            frontend_constraint=os.environ.get("RUNNER_SLURM_FRONTEND_CONSTRAINT"),
            export=export_names(components),
        )
        path = self.job_dir / "job.sbatch"
        path.write_text(script)
        self.submitted_at = time.monotonic()
        self.job_id = slurm(["sbatch", "--parsable", str(path)]).strip().split(";")[0]
        self.frontend_port = port_base
        timeout = float(self.config.get("ready_timeout_s") or 600)
        deadline = self.submitted_at + timeout
        while True:
            self.check()
            states = self.task_states()
            expected = sum(int(c["tasks"]) for c in components)
            if len(states) == expected and all(s["state"] == "ready" for s in states):
                break
            if time.monotonic() > deadline:
                pending = [f"{s['role']}-{s['rank']} on {s['node']}: {s['state']}" for s in states]
                raise LauncherError(
                    f"Slurm job {self.job_id}: not every task was ready within {timeout:g} s "
                    f"({len(states)} of {expected} started; {pending})"
                )
            time.sleep(0.25)
        frontend = next(s for s in states if s["role"] == "frontend")
        base_url = f"http://{frontend['host']}:{frontend['port']}/v1"
        models = wait_for_models(base_url, timeout_s=max(1.0, deadline - time.monotonic()))
        layout = self.layout()
        used = self.config.get("accelerators_used")
        if used is not None:
            verdict = verify_layout(layout, int(used))
            if verdict["status"] != "pass":
                raise LauncherError(f"Slurm job {self.job_id}: {verdict['summary']}")
        self.ready_after_s = round(time.monotonic() - self.submitted_at, 3)
        return Endpoint(
            served_model_name=self.config["served_model_name"],
            base_url=base_url,
            # the serving tasks' own counters: the frontend (the pool's router) forwards each
            # request to one of them, and its /metrics is one worker's at most
            metrics_urls=tuple(
                f"http://{s['host']}:{s['port']}" for s in states if s["role"] != "frontend"
            ),
            info={
                "launcher": "slurm",
                # the pinned image each task ran (none with the `host` runtime)
                "image": self.config.get("image") if self.runtime != "host" else None,
                "ready_after_s": self.ready_after_s,
                "models": models,
                "slurm": layout,
            },
        )

    def task_states(self) -> list[dict[str, Any]]:
        out = []
        for path in sorted((self.job_dir / "tasks").glob("*.json")):
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):  # being replaced: read next time
                continue
        return out

    def check(self) -> None:
        """Raise LauncherError naming the task, node and exit code when a task ended, or
        the job when Slurm ended it (a node that dropped, the time limit); renews the
        lease otherwise. The worker calls it between trials."""
        if self.job_id is None:
            return
        self.renew_lease()
        exited = [s for s in self.task_states() if s.get("state") == "exited"]
        listed = jobs(self.job_name)  # read after the task states: a task Slurm ended finds it
        mine = [
            j
            for j in listed
            if str(j.get("het_job_id") or j.get("job_id")) == self.job_id
            or str(j.get("job_id")) == self.job_id
        ]
        ended = [j for j in mine if str(j.get("job_state")) not in ACTIVE]
        # Slurm's own end (a node that dropped, the time limit, a scancel) is why its tasks
        # ended: named before them; a task's own exit before the job it ended
        by_slurm = [j for j in ended if str(j.get("job_state")) in ENDED_BY_SLURM]
        by_slurm.sort(key=lambda j: str(j.get("job_state")) != "NODE_FAIL")  # the cause first
        for state in exited if not by_slurm else []:
            self.cancel()
            raise LauncherError(
                f"Slurm job {self.job_id}: task {state['role']}-{state['rank']} on node "
                f"{state['node']} exited with code {state.get('exit_code')}"
                + (f" ({state['reason']})" if state.get("reason") else "")
            )
        if ended:
            j = (by_slurm or ended)[0]
            dropped = ""
            if str(j.get("job_state")) == "NODE_FAIL":
                # Slurm ends every component NODE_FAIL: name the component on the node that
                # dropped, and the node
                down = set(down_nodes())
                for c in by_slurm:
                    lost = [n for n in hostnames(str(c.get("nodes") or "")) if n in down]
                    if lost:
                        j, dropped = c, f"; node {', '.join(lost)} dropped"
                        break
            self.cancel()
            raise LauncherError(
                f"Slurm job {self.job_id} component {j.get('het_job_offset')} on nodes "
                f"{j.get('nodes')} ended: {j.get('job_state')} ({j.get('state_reason')}), "
                f"exit code {j.get('exit_code')}{dropped}"
            )

    def layout(self) -> dict[str, Any]:
        """What the result page shows: roles, nodes, GPUs per node, task states, each node's
        inventory, and the accelerators the tasks were given against the config's."""
        states = self.task_states()
        nodes: dict[str, dict[str, Any]] = {}
        for s in states:
            node = nodes.setdefault(
                s["node"],
                {"node": s["node"], "gpus": 0, "roles": [], "inventory": s.get("inventory")},
            )
            node["gpus"] += len(s.get("gpus") or [])
            if s["role"] not in node["roles"]:
                node["roles"].append(s["role"])
        tasks = [
            {
                "role": s["role"],
                "rank": s["rank"],
                "node": s["node"],
                "gpus": len(s.get("gpus") or []),
                # what its container was given (podman): exactly Slurm's allocation
                "devices": s.get("devices"),
                "state": s["state"],
                "exit_code": s.get("exit_code"),
            }
            for s in states
        ]
        return {
            "job_id": self.job_id,
            "job_name": self.job_name,
            "partition": self.partition,
            "runtime": self.runtime,
            "router": next((c["router"] for c in self.components if c["router"]), None),
            "roles": [
                {
                    "role": c["role"],
                    "nodes": c["nodes"],
                    "tasks": c["tasks"],
                    "gpus_per_task": c["gpus_per_task"],
                }
                for c in self.components
            ],
            "nodes": list(nodes.values()),
            "tasks": tasks,
            "accelerators": {
                "used": self.config.get("accelerators_used"),
                "given": sum(t["gpus"] for t in tasks),
            },
        }

    def cancel(self) -> None:
        cancel(self.job_name)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.stop_renewer()
        if self.job_id is not None:
            self.cancel()
            lease = self.job_dir / "lease"
            try:
                os.utime(lease, (0, 0))  # stale: the job's watchdog ends it even if scancel failed
            except OSError:
                pass

    def log_bytes(self) -> bytes:
        """The job's output and every task's log, each under its name, redacted as the
        container launcher's: secret values and the runner's paths replaced."""
        from runner.launchers.sandbox import redact_output

        parts = []
        for path in sorted((self.job_dir / "logs").glob("*")):
            if path.is_file():
                parts.append(f"==> {path.name} <==\n".encode() + path.read_bytes()[-2_000_000:])
        text = b"\n".join(parts).decode(errors="replace")
        paths = [str(self.job_dir), str(REPO_ROOT), tempfile.gettempdir()]
        return redact_output(text, secrets=self._secrets, paths=paths, cap=None).encode()


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
    section = launcher_section(config)
    partition = os.environ.get("RUNNER_SLURM_PARTITION") or None
    components = plan(section, partition_capacity(partition))
    return render_script(
        job_name=job_name,
        job_dir=job_dir,
        components=components,
        time_limit_min=max(1, math.ceil(section["time_limit_s"] / 60)),
        partition=partition,
        python="python3",
        runtime=runtime,
        image=section["image"],
        frontend_constraint=frontend_constraint,
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m runner.launchers.slurm render CONFIG [--test-only]`: print the job of a
    deployment config for the cluster SLURM_CONF names; `--test-only` also asks Slurm
    (`sbatch --test-only`) whether and where it would start. `reap`: cancel orphans."""
    import argparse

    import yaml

    ap = argparse.ArgumentParser(prog="python -m runner.launchers.slurm")
    sub = ap.add_subparsers(dest="command", required=True)
    render = sub.add_parser("render")
    render.add_argument("config")
    render.add_argument("--job-name", default=f"{JOB_PREFIX}example")
    render.add_argument("--job-dir", default="/shared/agentperf/jobs/example")
    render.add_argument("--runtime", default="pyxis", choices=["pyxis", "podman", "host"])
    render.add_argument("--frontend-constraint", default=None)
    render.add_argument("--test-only", action="store_true")
    sub.add_parser("reap")
    args = ap.parse_args(argv)
    if args.command == "reap":
        for name in reap_orphans():
            print(f"cancelled {name}")
        return 0
    config = yaml.safe_load(Path(args.config).read_text())
    try:
        script = render_config(
            config,
            job_name=args.job_name,
            job_dir=args.job_dir,
            runtime=args.runtime,
            frontend_constraint=args.frontend_constraint,
        )
    except LauncherError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    print(script, end="")
    if args.test_only:
        done = subprocess.run(
            ["sbatch", "--test-only"], input=script, capture_output=True, text=True, timeout=60
        )
        print((done.stdout + done.stderr).strip(), file=sys.stderr)
        return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
