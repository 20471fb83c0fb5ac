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
from pathlib import Path
from typing import Any

from runner.launchers.devices import DeviceGrant
from runner.launchers.slurm import PORT_STRIDE, expand_hostlist

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runner.launchers.slurm_task")
    ap.add_argument("--job-dir", required=True)
    ap.add_argument("--group", type=int, required=True)
    args = ap.parse_args(argv)
    job_dir = Path(args.job_dir)
    job = json.loads((job_dir / "job.json").read_text())
    env = dict(os.environ)
    rank = int(env.get("SLURM_PROCID", "0"))
    component = next(c for c in job["components"] if int(c["group"]) == args.group)
    role = str(component["role"])
    values = variables(job, args.group, rank, env)
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    gpus = [
        g
        for g in (env.get("SLURM_STEP_GPUS") or env.get("CUDA_VISIBLE_DEVICES") or "").split(",")
        if g
    ]
    state_path = job_dir / "tasks" / f"{role}-{rank}.json"
    state: dict[str, Any] = {
        "role": role,
        "group": args.group,
        "rank": rank,
        "node": node,
        "host": values["HOST"],
        "port": int(values["PORT"]),
        "gpus": gpus,
        "state": "starting",
        "slurm_job_id": env.get("SLURM_JOB_ID"),
        "inventory": machine_inventory(),
    }
    write_state(state_path, state)
    name = f"{job['job_name']}-{env.get('SLURM_JOB_ID', 'nojob')}-{role}-{rank}"
    if component.get("router") == "nginx":
        serving = [c for c in job["components"] if c.get("serving")]
        upstreams = [  # each worker's leading task (rank 0 of a worker wider than a node)
            u
            for c in serving
            for i, u in enumerate(values[f"ROLE_{c['role']}_HOSTS"].split(","))
            if i % int(c.get("nodes_per_worker") or 1) == 0
        ]
        argv_ = nginx_argv(job_dir, name, int(values["PORT"]), upstreams, log_stem=f"{role}-{rank}")
        child_env = {"PATH": env.get("PATH", "/usr/bin:/bin")}
    else:
        declared = resolve_env(component.get("env") or {})
        # the pool host's RUNNER_LAUNCH_VARS (exported into the job), as for `process`
        from runner.launchers.sandbox import launch_variables

        command = substitute(
            list(component["command"]), {**launch_variables(), **declared, **values}
        )
        child_env = {
            "PATH": env.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": env.get("PYTHONPATH", ""),
            **declared,
            **{k: v for k, v in values.items()},
        }
        child_env.update({k: env[k] for k in ("CUDA_VISIBLE_DEVICES",) if k in env})
        grant = None
        if job.get("runtime") == "podman":
            # exactly the GPUs Slurm allocated this task, as devices of its container; the
            # container numbers them from 0, so Slurm's CUDA_VISIBLE_DEVICES stays outside
            from runner.launchers.base import LauncherError
            from runner.launchers.slurm_devices import task_grant

            try:
                grant = task_grant(
                    env,
                    node,
                    wanted=int(component.get("gpus_per_task") or 0),
                    declared=job.get("slurm_gpus"),
                    shared=job.get("shared_devices"),
                    shm_size=job.get("shm_size"),
                    memlock=job.get("memlock"),
                )
            except LauncherError as exc:
                state.update(state="exited", exit_code=126, reason=f"GPUs: {exc}")
                write_state(state_path, state)
                return 126
            state["devices"] = grant.describe()
            write_state(state_path, state)
        argv_ = runtime_argv(job, command, sorted(set(declared) | set(values)), name, grant)
        if job.get("runtime") == "podman":  # podman itself needs its host's environment
            child_env = {**env, **child_env}
    log = open(job_dir / "logs" / f"{role}-{rank}.log", "ab")
    if job.get("pull") and component.get("router") is None:  # the pinned image, by digest
        from runner.launchers.container import reap_orphans

        try:  # containers of this node's tasks that were killed before they could remove them
            reap_orphans(list(job.get("podman") or ["podman"]))
        except Exception as exc:  # the reaper's trouble is not this task's
            log.write(f"container reaper: {exc}\n".encode())
        pulled = subprocess.run(job["pull"], stdout=log, stderr=subprocess.STDOUT, timeout=3600)
        if pulled.returncode != 0:
            state.update(state="exited", exit_code=125, reason="image pull failed")
            write_state(state_path, state)
            return 125
    child = subprocess.Popen(argv_, env=child_env, stdout=log, stderr=subprocess.STDOUT)
    state.update(pid=child.pid, command=argv_[:1])
    write_state(state_path, state)

    podman = list(job.get("podman") or ["podman"])
    in_container = job.get("runtime") == "podman" and component.get("router") is None

    def remove_container() -> None:
        # the container runs under conmon, not under this task: scancel's signals do not
        # reach it, so it is removed here (and by the reaper if this task was SIGKILLed)
        subprocess.run(
            [*podman, "rm", "--force", "--ignore", "--time", "2", name],
            capture_output=True,
            timeout=60,
        )

    def forward(signum: int, frame: Any) -> None:
        if in_container:
            remove_container()
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    ready = False
    while child.poll() is None:
        path = component.get("ready_path")
        port = int(values["PORT"])
        if not ready and (http_ready(port, path) if path else port_ready("127.0.0.1", port)):
            ready = True
            state.update(state="ready", ready_at=time.time())
            write_state(state_path, state)
        time.sleep(0.2 if not ready else 0.5)
    code = child.returncode
    if in_container:
        remove_container()
    exit_code = 128 - code if code < 0 else code  # a signal as the shell reports it
    state.update(state="exited", exit_code=exit_code, exited_at=time.time())
    write_state(state_path, state)
    log.close()
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
