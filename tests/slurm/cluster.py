"""A private Slurm cluster for the Slurm launcher's tests (docs/pipeline.md "Slurm"):
Debian's slurm-wlm and munge on this host, on its own ports, with its state in a temporary
folder; started once per test session by tests/slurm/conftest.py, only when a Slurm test
runs, and stopped by PID at its end."""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.services import _free_base_port, wait_port

SLURM_NODES = 3  # tests/slurm: a frontend node and two worker nodes
SLURM_NODE_CPUS = 2
SLURM_NODE_GPUS = 2  # stand-in nodes (stand_in_gpus): Slurm allocates them, no GPU behind


@dataclass
class SlurmCluster:
    """A private Slurm cluster on this host (Debian slurm-wlm + munge): munged with its own
    key and socket, slurmctld and one slurmd per node (NodeHostname=localhost, a port each:
    Debian builds slurmd with multiple-slurmd support), state in a temporary folder, its own
    ports; every daemon in the foreground, stopped by PID (docs/pipeline.md "Slurm")."""

    processes: list[subprocess.Popen]
    folder: Path
    partition: str
    nodes: list[str]

    @property
    def conf(self) -> Path:
        return self.folder / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5  # one grace period for all, then SIGKILL
        for process in reversed(self.processes):
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._end_steps()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _end_steps(self) -> None:
        """End this cluster's job steps that outlived their slurmd (a test that drops a node
        kills its slurmd; Slurm's step daemons run in sessions of their own): each
        slurmstepd holds its node's log in this cluster's folder open, and its tasks run in
        its session, so every process in those sessions goes (SIGKILL, by PID)."""
        folder = str(self.folder)
        sessions = set()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if not (proc / "comm").read_text().startswith("slurmstepd"):
                    continue
                if any(os.readlink(fd).startswith(folder) for fd in (proc / "fd").iterdir()):
                    sessions.add(os.getsid(int(proc.name)))
            except OSError:
                continue
        if not sessions:
            return
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    if os.getsid(int(proc.name)) in sessions:
                        os.kill(int(proc.name), signal.SIGKILL)
                except OSError:
                    continue


def _slurm_conf(
    folder: Path, base: int, nodes: list[str], partition: str, cluster: str | None = None
) -> str:
    lines = [
        "ClusterName=agentperf-test",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={base}",
        f"SlurmdPort={base + 1}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={folder}/munge.sock",
        f"StateSaveLocation={folder}/state",
        f"SlurmdSpoolDir={folder}/spool/%n",
        f"SlurmctldPidFile={folder}/slurmctld.pid",
        f"SlurmdPidFile={folder}/slurmd-%n.pid",
        f"SlurmctldLogFile={folder}/log/slurmctld.log",
        f"SlurmdLogFile={folder}/log/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "GresTypes=gpu",
        "ReturnToService=2",
        "SchedulerType=sched/backfill",
        # heterogeneous jobs are started by the backfill scheduler only: every second
        "SchedulerParameters=bf_interval=1",
        "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SlurmdParameters=config_overrides",
        "PlugStackConfig=/dev/null",
        "SlurmdTimeout=10",
        "MinJobAge=600",
        "KillWait=5",
    ]
    if cluster is not None:  # a described cluster (deploy/slurm/): its own node lines,
        # addressed to loopback here (no slurmd runs; the controller only plans)
        return "\n".join(lines + _local_nodes(cluster, base + 2)[0]) + "\n"
    for i, node in enumerate(nodes):
        lines.append(
            f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={base + 2 + i} "
            f"CPUs={SLURM_NODE_CPUS} RealMemory=1000 Gres=gpu:{SLURM_NODE_GPUS} State=UNKNOWN"
        )
    lines.append(
        f"PartitionName={partition} Nodes={','.join(nodes)} Default=YES MaxTime=60 State=UP"
    )
    return "\n".join(lines) + "\n"


def _local_nodes(cluster: str, port: int) -> tuple[list[str], list[str]]:
    """A described cluster's lines with every node on this host: one NodeName line per node
    (NodeHostname=localhost, a port each, for its own slurmd); (lines, node names)."""
    from runner.launchers.slurm_cluster import expand_hostlist

    out: list[str] = []
    names: list[str] = []
    for line in cluster.splitlines():
        if not line.startswith("NodeName="):
            out.append(line)
            continue
        spec, _, rest = line.partition(" ")
        for name in expand_hostlist(spec.removeprefix("NodeName=")):
            out.append(
                f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 "
                f"Port={port + len(names)} {rest}"
            )
            names.append(name)
    return out, names


# Stand-in GPU nodes: real character devices (the host's null, zero, full, random: one
# major/minor each, so a container's /dev/nvidiaN shows which one it was given)
STAND_IN_DEVICES = ((1, 3), (1, 5), (1, 7), (1, 8))


def stand_in_gpus(folder: Path) -> str:
    """SLURM_NODE_GPUS character devices named nvidia0, nvidia1 … in `folder` (mknod: no
    GPU here), as a gres.conf `File=` list."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    for index, (major, minor) in enumerate(STAND_IN_DEVICES[:SLURM_NODE_GPUS]):
        os.mknod(folder / f"nvidia{index}", stat.S_IFCHR | 0o666, os.makedev(major, minor))
        (folder / f"nvidia{index}").chmod(0o666)
    return f"{folder}/nvidia[0-{SLURM_NODE_GPUS - 1}]"


def start_slurm(cluster: str | None = None, gres: str | None = None) -> SlurmCluster:
    """munged, slurmctld and SLURM_NODES slurmd on loopback; waits until every node is idle.

    With `cluster` (NodeName/PartitionName lines, e.g. deploy/slurm/gb300-nvl72.conf) and its
    `gres` lines: slurmctld alone describing that cluster, for `sbatch --test-only`."""
    for tool in ("munged", "slurmctld", "slurmd", "sinfo"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            raise RuntimeError(f"{tool} is not installed (make slurm)")
    folder = Path(tempfile.mkdtemp(prefix="agentperf-slurm-"))
    folder.chmod(0o755)  # munge's socket must be reachable through the folder
    for sub in ("state", "spool", "log"):
        (folder / sub).mkdir()
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    partition = "agentperf"
    nodes = [f"node{i + 1}" for i in range(SLURM_NODES)]
    slurmds = len(_local_nodes(cluster, 0)[1]) if cluster is not None else SLURM_NODES
    # slurmctld (base), SlurmdPort (base + 1), one slurmd per node (base + 2 …)
    base = _free_base_port(count=2 + slurmds)
    (folder / "slurm.conf").write_text(_slurm_conf(folder, base, nodes, partition, cluster))
    files = stand_in_gpus(folder / "dev")
    (folder / "gres.conf").write_text(
        gres or f"AutoDetect=off\nNodeName={','.join(nodes)} Name=gpu File={files}\n"
    )
    if cluster is not None:  # one slurmd per described node, its GPUs stand-in files
        nodes = _local_nodes(cluster, base + 2)[1]
        stand_in = "/dev/null,/dev/zero,/dev/full,/dev/random"
        (folder / "gres.conf").write_text(
            re.sub(r"File=/dev/nvidia\[0-3\]", f"File={stand_in}", gres or "")
        )
    env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}
    conf = str(folder / "slurm.conf")
    commands = [
        [
            "munged",
            "--foreground",
            "--force",
            f"--key-file={key}",
            f"--socket={folder}/munge.sock",
            f"--pid-file={folder}/munged.pid",
            f"--log-file={folder}/log/munged.log",
            f"--seed-file={folder}/munged.seed",
        ],
        ["slurmctld", "-D", "-i", "-f", conf],
        *[["slurmd", "-D", "-f", conf, "-N", node] for node in nodes],
    ]
    processes: list[subprocess.Popen] = []
    handle = SlurmCluster(processes, folder, partition, nodes)
    try:
        for i, argv in enumerate(commands):
            out = open(folder / "log" / f"daemon-{i}.out", "wb")
            processes.append(
                subprocess.Popen(
                    argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
                )
            )
            if i == 0:
                deadline = time.monotonic() + 15
                while not (folder / "munge.sock").exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
            if i == 1:
                wait_port(base, 30, "slurmctld")
        deadline = time.monotonic() + 60
        states = ""
        while time.monotonic() < deadline:
            dead = [p.args[0] for p in processes if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead} exited")
            run = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%N %t"], env=env, capture_output=True, text=True
            )
            states = run.stdout
            if run.returncode == 0 and states.split().count("idle") == len(nodes):
                return handle
            time.sleep(0.2)
        raise RuntimeError(f"the Slurm nodes are not idle within 60 s: {states!r}")
    except Exception:
        logs = "".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
            for p in sorted((folder / "log").glob("*"))
        )
        handle.stop()
        raise RuntimeError(f"Slurm failed to start:\n{logs}") from None
