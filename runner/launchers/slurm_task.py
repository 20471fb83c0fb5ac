"""One task of a Slurm launch (docs/pipeline.md "Slurm"): `srun` starts
`python -m runner.launchers.slurm_task --job-dir D --group G` once per task of the job's
heterogeneous component G.

The task finds its peers through Slurm's environment alone: the component's node list
(`SLURM_JOB_NODELIST_HET_GROUP_<n>`), its tasks per node (`SLURM_TASKS_PER_NODE_HET_GROUP_<n>`)
and a port per task (the job's port base + 100 × component + task rank). From them it
builds the variables a command may name: `${PORT}`, `${HOST}`, `${ROLE}`, `${TASK_INDEX}`,
`${ROLE_<role>_HOSTS}` (host:port of every task of the role, comma-separated),
`${ROLE_<role>_NODES}`, and for a worker wider than a node (one task per node)
`${WORKER_INDEX}`, `${WORKER_RANK}`, `${WORKER_SIZE}` and `${WORKER_LEADER}` (the address of
its rank 0, e.g. a torch.distributed master). It runs the role's command through the pool's runtime (Podman with
the pinned image, or the host), writes its state (`starting`, `ready` once its port
accepts connections, `exited` with the exit code) to `<job dir>/tasks/<role>-<rank>.json`
for the runner, and exits with the command's status, which ends the job.

The pool-supplied frontend (`role: frontend`, `router: nginx`) is Debian's nginx as a
round-robin upstream over every task of the serving role.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from runner.launchers.devices import DeviceGrant
from runner.launchers.slurm_cluster import expand_hostlist
from runner.launchers.slurm_job import PORT_STRIDE

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_tasks_per_node(text: str) -> list[int]:
    """`2(x3),1` → [2, 2, 2, 1]."""
    counts: list[int] = []
    for item in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if not match:
            raise ValueError(f"cannot read tasks per node {text!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def group_tasks(group: int, env: dict[str, str], port_base: int) -> list[dict[str, Any]]:
    """Every task of heterogeneous component `group`: rank, node and port, in rank order
    (Slurm's default block distribution), from the job's environment."""
    nodes = expand_hostlist(env[f"SLURM_JOB_NODELIST_HET_GROUP_{group}"])
    per_node = expand_tasks_per_node(env[f"SLURM_TASKS_PER_NODE_HET_GROUP_{group}"])
    tasks: list[dict[str, Any]] = []
    for node, count in zip(nodes, per_node, strict=True):
        for _ in range(count):
            rank = len(tasks)
            tasks.append(
                {"rank": rank, "node": node, "port": port_base + PORT_STRIDE * group + rank}
            )
    return tasks


def variables(job: dict[str, Any], group: int, rank: int, env: dict[str, str]) -> dict[str, str]:
    """What a command may name (the module docstring lists them)."""
    addrs: dict[str, str] = job.get("node_addrs") or {}
    out: dict[str, str] = {}
    me: dict[str, Any] | None = None
    mine: dict[str, Any] = {}
    tasks_of_mine: list[dict[str, Any]] = []
    for component in job["components"]:
        tasks = group_tasks(int(component["group"]), env, int(job["port_base"]))
        role = str(component["role"])
        out[f"ROLE_{role}_HOSTS"] = ",".join(
            f"{addrs.get(t['node'], t['node'])}:{t['port']}" for t in tasks
        )
        out[f"ROLE_{role}_NODES"] = ",".join(dict.fromkeys(t["node"] for t in tasks))
        if int(component["group"]) == group:
            me, mine, tasks_of_mine = tasks[rank], component, tasks
            out["ROLE"] = role
    assert me is not None
    # a worker wider than a node is `nodes_per_worker` consecutive tasks; its rank 0 leads
    span = int(mine.get("nodes_per_worker") or 1)
    leader = tasks_of_mine[rank - rank % span]
    out["WORKER_INDEX"] = str(rank // span)
    out["WORKER_RANK"] = str(rank % span)
    out["WORKER_SIZE"] = str(span)
    out["WORKER_LEADER"] = addrs.get(leader["node"], leader["node"])
    out["PORT"] = str(me["port"])
    out["HOST"] = addrs.get(me["node"], me["node"])
    out["TASK_INDEX"] = str(rank)
    return out


def host_secret(name: str) -> str:
    """A secret by name: the runner host's variable, exported into the job by sbatch."""
    if name not in os.environ:
        raise SystemExit(f"secret {name} is not set in the job's environment")
    return os.environ[name]


def resolve_env(env: dict[str, Any]) -> dict[str, str]:
    """Clear values as given; `{secret: true}` from the job's environment (same name)."""
    return {
        str(k): host_secret(str(k)) if isinstance(v, dict) and v.get("secret") else str(v)
        for k, v in env.items()
    }


def substitute(items: list[Any], values: dict[str, str]) -> list[str]:
    def one(item: Any) -> str:
        if isinstance(item, dict) and item.get("secret") is True:
            return host_secret(str(item.get("name", "")))
        text = str(item)

        def repl(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in values:
                raise SystemExit(f"${{{name}}} is not set for this task")
            return values[name]

        return _VAR.sub(repl, text)

    return [one(item) for item in items]


def machine_inventory() -> dict[str, Any]:
    """This node's inventory (agentperf/inventory.py's document): the worker's collection
    (runner/worker/host_inventory.py: the node's accelerators from NVML, nvidia-smi or amd-smi,
    and its CPU, memory and kernel); where that fails, the machine alone and why."""
    try:
        from agentperf.inventory import Inventory
        from runner.worker.host_inventory import accelerator_inventory, machine_record

        doc, notes = accelerator_inventory(None)  # every accelerator the node lists
        doc["notes"] = notes
        doc["machine"] = machine_record()
        return dict(Inventory.model_validate(doc).model_dump(mode="json"))
    except Exception as exc:  # a collector that fails records why, not nothing
        reason = f"{type(exc).__name__}: {exc}"[:300]
    return {
        "tool": "none",
        "reason": reason,
        "accelerators": [],
        "machine": {"cpu_count": os.cpu_count(), "kernel": platform.release()},
    }


def write_state(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, sort_keys=True))
    os.replace(tmp, path)


def port_ready(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def http_ready(port: int, path: str) -> bool:
    """GET http://127.0.0.1:<port><path> answers 2xx (a server still loading answers 503)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2.0) as response:
            return 200 <= int(response.status) < 300
    except (OSError, ValueError, http.client.HTTPException):
        return False


def nginx_argv(
    job_dir: Path, name: str, port: int, upstreams: list[str], *, log_stem: str = "router"
) -> list[str]:
    """Debian's nginx as the pool's router: a round-robin upstream over `upstreams`,
    streaming (no buffering), HTTP/1.1 with one connection per request to the workers
    (docs/pipeline.md "The router"). Its error log and a line per request that went to
    more than one worker go to the job's `logs/` (`<log_stem>.router-error.log`,
    `<log_stem>.router-retries.log`), so the run's uploaded logs carry them."""
    prefix = job_dir / name
    for sub in ("tmp", "logs"):
        (prefix / sub).mkdir(parents=True, exist_ok=True)
        (prefix / sub).chmod(0o777)
    logs = job_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    servers = "\n".join(f"    server {u} max_fails=0;" for u in upstreams)
    conf = f"""worker_processes 1;
pid {prefix}/nginx.pid;
error_log {logs}/{log_stem}.router-error.log warn;
events {{ worker_connections 1024; }}
http {{
  # one line per request that went to more than one worker ($upstream_addr "a, b")
  map $upstream_addr $agentperf_retried {{
    "~," 1;
    default 0;
  }}
  log_format agentperf_retry '$time_iso8601 $request_method $request_uri $status '
                             'upstreams=[$upstream_addr] statuses=[$upstream_status] '
                             'x_request_id=$http_x_request_id';
  access_log {logs}/{log_stem}.router-retries.log agentperf_retry if=$agentperf_retried;
  client_body_temp_path {prefix}/tmp/body;
  proxy_temp_path {prefix}/tmp/proxy;
  fastcgi_temp_path {prefix}/tmp/fastcgi;
  uwsgi_temp_path {prefix}/tmp/uwsgi;
  scgi_temp_path {prefix}/tmp/scgi;
  # No keep-alive to the workers. llama.cpp's server closes the connection after every
  # streamed response although its headers say keep-alive; nginx, sending the next request
  # on that connection before it sees the close (a busy node), got no answer and returned
  # a 502, an error of the router in the deployment's measurement. A retry cannot cover it
  # (with every worker's cached connection stale, nginx has no worker left to try). A fresh
  # connection per request costs a connect on the pool's network and nothing else.
  upstream workers {{
{servers}
  }}
  server {{
    listen 0.0.0.0:{port};
    client_max_body_size 64m;
    location / {{
      proxy_pass http://workers;
      proxy_http_version 1.1;
      proxy_set_header Connection close;
      proxy_buffering off;
      proxy_request_buffering off;
      # nginx's default: a worker that refuses the connection is skipped (the request goes
      # to the next one and is a line of the retries log); a POST once sent is never sent
      # again, and a worker's own HTTP error is passed on as it came
      proxy_next_upstream error timeout;
      proxy_read_timeout 3600s;
      proxy_send_timeout 3600s;
      add_header X-Upstream $upstream_addr always;
    }}
  }}
}}
"""
    (prefix / "nginx.conf").write_text(conf)
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    return [nginx, "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-g", "daemon off;"]


def runtime_argv(
    job: dict[str, Any],
    command: list[str],
    env_names: list[str],
    name: str,
    grant: DeviceGrant | None = None,
) -> list[str]:
    """The command as the pool's runtime runs it: `podman` (the pinned image, with the
    container launcher's isolation but the node's network: tasks reach each other across
    nodes; ``grant``: exactly the GPUs Slurm allocated this task, runner/launchers/
    slurm_devices.py), or `host` (the command as given, on a vendor's own pool only)."""
    runtime = job.get("runtime") or "host"
    if runtime in ("host", "pyxis"):  # pyxis: srun already started this task in the image
        return command
    if runtime == "podman":
        from runner.launchers.container import (
            LABEL_LAUNCHER,
            LABEL_RUN,
            LABEL_WORKER,
            ContainerSpec,
            default_memory_limit,
            podman_run_argv,
            worker_label,
        )

        spec = ContainerSpec(
            image=str(job["image"]),
            command=command,
            name=name,
            # owned by this task's process: the pool's container reaper removes the
            # container of a task that was killed before it could
            labels={
                LABEL_LAUNCHER: "container",  # the container launcher's reaper's label
                LABEL_RUN: str(job["job_name"]),
                LABEL_WORKER: worker_label(os.getpid()),
                "agentperf.slurm": "task",
            },
            env_names=env_names,
            # the node's network: tasks reach each other and the router reaches the workers
            # across nodes at the node's address (docs/pipeline.md "Slurm")
            network="host",
            read_only_mounts=list(job.get("read_only_mounts") or []),
            # RUNNER_CONTAINER_MEMORY, else nine tenths of this node's memory, as `container`
            memory=job.get("container_memory") or default_memory_limit(),
            shm_size=job.get("shm_size"),  # RUNNER_SHM_SIZE (default 1 GiB), as `container`
            podman=list(job.get("podman") or ["podman"]),
            devices=grant.podman_devices() if grant is not None else [],
            platform_env=grant.visible_env() if grant is not None else {},
            memlock=(
                None
                if grant is None
                else "-1"
                if grant.memlock_bytes is None
                else str(grant.memlock_bytes)
            ),
        )
        return podman_run_argv(spec)
    raise SystemExit(f"unknown runtime {runtime!r} (podman, pyxis or host)")


class TaskExit(Exception):
    """The task ends before its command runs (its GPUs, its image): the state file says
    why, and the task exits with `code`."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass
class Task:
    """One task of the job as it runs on its node: the job document, its component, the
    variables its command may name, and the state file the runner reads."""

    job_dir: Path
    job: dict[str, Any]
    group: int
    rank: int
    env: dict[str, str]
    component: dict[str, Any] = field(init=False)
    values: dict[str, str] = field(init=False)
    node: str = field(init=False)
    state: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.component = next(c for c in self.job["components"] if int(c["group"]) == self.group)
        self.values = variables(self.job, self.group, self.rank, self.env)
        self.node = self.env.get("SLURMD_NODENAME") or socket.gethostname()
        gpus = self.env.get("SLURM_STEP_GPUS") or self.env.get("CUDA_VISIBLE_DEVICES") or ""
        self.state = {
            "role": self.role,
            "group": self.group,
            "rank": self.rank,
            "node": self.node,
            "host": self.values["HOST"],
            "port": self.port,
            "gpus": [g for g in gpus.split(",") if g],
            "state": "starting",
            "slurm_job_id": self.env.get("SLURM_JOB_ID"),
            "inventory": machine_inventory(),
        }

    @property
    def role(self) -> str:
        return str(self.component["role"])

    @property
    def port(self) -> int:
        return int(self.values["PORT"])

    @property
    def name(self) -> str:
        """Its container's name (podman), unique to the job, its role and rank."""
        job_id = self.env.get("SLURM_JOB_ID", "nojob")
        return f"{self.job['job_name']}-{job_id}-{self.role}-{self.rank}"

    @property
    def is_router(self) -> bool:
        return self.component.get("router") == "nginx"

    @property
    def in_container(self) -> bool:
        return self.job.get("runtime") == "podman" and self.component.get("router") is None

    @property
    def podman(self) -> list[str]:
        return list(self.job.get("podman") or ["podman"])

    def write(self, **changes: Any) -> None:
        self.state.update(changes)
        write_state(self.job_dir / "tasks" / f"{self.role}-{self.rank}.json", self.state)

    def router_launch(self) -> tuple[list[str], dict[str, str]]:
        """The pool's nginx over each worker's leading task (rank 0 of a worker wider than
        a node), with only PATH from the job's environment."""
        serving = [c for c in self.job["components"] if c.get("serving")]
        upstreams = [
            u
            for c in serving
            for i, u in enumerate(self.values[f"ROLE_{c['role']}_HOSTS"].split(","))
            if i % int(c.get("nodes_per_worker") or 1) == 0
        ]
        log_stem = f"{self.role}-{self.rank}"
        argv = nginx_argv(self.job_dir, self.name, self.port, upstreams, log_stem=log_stem)
        return argv, {"PATH": self.env.get("PATH", "/usr/bin:/bin")}

    def command_launch(self) -> tuple[list[str], dict[str, str]]:
        """The role's command with its variables and declared env (secrets by name), through
        the pool's runtime; TaskExit when its GPUs cannot be given."""
        from runner.launchers.sandbox import launch_variables

        declared = resolve_env(self.component.get("env") or {})
        # the pool host's RUNNER_LAUNCH_VARS (exported into the job), as for `process`
        variables_ = {**launch_variables(), **declared, **self.values}
        command = substitute(list(self.component["command"]), variables_)
        child_env = {
            "PATH": self.env.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": self.env.get("PYTHONPATH", ""),
            **declared,
            **self.values,
        }
        child_env.update({k: self.env[k] for k in ("CUDA_VISIBLE_DEVICES",) if k in self.env})
        grant = self.container_grant() if self.job.get("runtime") == "podman" else None
        names = sorted(set(declared) | set(self.values))
        argv = runtime_argv(self.job, command, names, self.name, grant)
        if self.job.get("runtime") == "podman":  # podman itself needs its host's environment
            child_env = {**self.env, **child_env}
        return argv, child_env

    def container_grant(self) -> DeviceGrant:
        """Exactly the GPUs Slurm allocated this task, as devices of its container; the
        container numbers them from 0, so Slurm's CUDA_VISIBLE_DEVICES stays outside."""
        from runner.launchers.base import LauncherError
        from runner.launchers.slurm_devices import task_grant

        job = self.job
        try:
            grant = task_grant(
                self.env,
                self.node,
                wanted=int(self.component.get("gpus_per_task") or 0),
                declared=job.get("slurm_gpus"),
                shared=job.get("shared_devices"),
                shm_size=job.get("shm_size"),
                memlock=job.get("memlock"),
            )
        except LauncherError as exc:
            raise TaskExit(126, f"GPUs: {exc}") from exc
        self.write(devices=grant.describe())
        return grant

    def pull_image(self, log: IO[bytes]) -> None:
        """The pinned image, by digest, before the command runs (podman), after sweeping
        the containers of this node's tasks that were killed before they could remove
        them; TaskExit when the pull fails."""
        if not self.job.get("pull") or self.component.get("router") is not None:
            return
        from runner.launchers.container import reap_orphans

        try:
            reap_orphans(self.podman)
        except Exception as exc:  # the reaper's trouble is not this task's
            log.write(f"container reaper: {exc}\n".encode())
        pulled = subprocess.run(
            self.job["pull"], stdout=log, stderr=subprocess.STDOUT, timeout=3600
        )
        if pulled.returncode != 0:
            raise TaskExit(125, "image pull failed")

    def remove_container(self) -> None:
        """The container runs under conmon, not under this task: scancel's signals do not
        reach it, so it is removed here (and by the reaper if this task was SIGKILLed)."""
        subprocess.run(
            [*self.podman, "rm", "--force", "--ignore", "--time", "2", self.name],
            capture_output=True,
            timeout=60,
        )

    def supervise(self, child: subprocess.Popen[bytes]) -> int:
        """Forward SIGTERM/SIGINT to the command, mark the task ready once it answers
        (its ready path, else its port), and return its exit status as the shell reports
        it (128 + the signal)."""

        def forward(signum: int, frame: Any) -> None:
            if self.in_container:
                self.remove_container()
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        ready = False
        path = self.component.get("ready_path")
        while child.poll() is None:
            if not ready and (
                http_ready(self.port, path) if path else port_ready("127.0.0.1", self.port)
            ):
                ready = True
                self.write(state="ready", ready_at=time.time())
            time.sleep(0.2 if not ready else 0.5)
        code = child.returncode
        if self.in_container:
            self.remove_container()
        return 128 - code if code < 0 else code


def run_task(task: Task) -> int:
    """Start the task's command (or the router), supervise it, and record how it ended."""
    task.write()
    try:
        argv, child_env = task.router_launch() if task.is_router else task.command_launch()
        log = open(task.job_dir / "logs" / f"{task.role}-{task.rank}.log", "ab")
        task.pull_image(log)
    except TaskExit as exc:
        task.write(state="exited", exit_code=exc.code, reason=exc.reason)
        return exc.code
    child = subprocess.Popen(argv, env=child_env, stdout=log, stderr=subprocess.STDOUT)
    task.write(pid=child.pid, command=argv[:1])
    exit_code = task.supervise(child)
    task.write(state="exited", exit_code=exit_code, exited_at=time.time())
    log.close()
    return exit_code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runner.launchers.slurm_task")
    ap.add_argument("--job-dir", required=True)
    ap.add_argument("--group", type=int, required=True)
    args = ap.parse_args(argv)
    job_dir = Path(args.job_dir)
    job = json.loads((job_dir / "job.json").read_text())
    env = dict(os.environ)
    rank = int(env.get("SLURM_PROCID", "0"))
    return run_task(Task(job_dir=job_dir, job=job, group=args.group, rank=rank, env=env))


if __name__ == "__main__":
    sys.exit(main())
