"""Slurm's commands as the `slurm` launcher uses them (docs/pipeline.md "Slurm"): `sbatch`,
`squeue --json`, `sinfo --json`, `scancel`, `scontrol show hostnames`, never a library
binding: the commands are what every Slurm site has, they speak to the controller with the
site's own authentication (munge), and `--json` (Slurm >= 21.08) gives a parsed document
(pyslurm is tied to one Slurm release per build).

Also the platform's own jobs on the cluster: their names (`JOB_PREFIX`), the runner's lease
(`RUNNER_SLURM_LEASE_S`) and the reaper of jobs whose runner died (`reap_orphans`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from runner.launchers.base import LauncherError

JOB_PREFIX = "agentperf-run-"
LEASE_S = 60  # the job ends when the runner has not renewed its lease for this long


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


def lease_s() -> int:
    """`RUNNER_SLURM_LEASE_S`, else LEASE_S."""
    return int(os.environ.get("RUNNER_SLURM_LEASE_S") or LEASE_S)


ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING"}
# a job Slurm ended, not one of its tasks: reported before the tasks it took down
ENDED_BY_SLURM = {"NODE_FAIL", "TIMEOUT", "CANCELLED", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


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
