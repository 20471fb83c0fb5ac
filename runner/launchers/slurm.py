"""The `slurm` launcher: a topology that spans nodes, launched as one Slurm job
(docs/pipeline.md "Slurm").

Every role of the config's topology (`topology.roles`: workers × accelerators per worker)
becomes one component of a heterogeneous job, with its node count and GPUs per task;
component 0 is the frontend that serves the OpenAI API: the config's declared frontend, or
the pool's router (Debian nginx, round-robin over the serving role's tasks). The job is
named after the run, has a time limit, and ends when any task ends, when the runner's lease
goes stale (a dead worker), at the time limit, or at `scancel`.

The job itself (its components and sbatch script) is runner/launchers/slurm_job.py; the
Slurm commands the launcher runs, runner/launchers/slurm_cluster.py; each task's wrapper on
the nodes, runner/launchers/slurm_task.py. `sacct` needs slurmdbd, which many clusters (and
the test cluster) do not run: task exit states come from the tasks' own state files in the
job folder (a filesystem every node and the runner share, `RUNNER_SLURM_SHARED_DIR`).

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
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentperf import contract
from runner.launchers.base import Endpoint, LauncherError, wait_for_models
from runner.launchers.devices import DeviceGrant
from runner.launchers.sections import WrittenSlurm, read_section
from runner.launchers.slurm_cluster import (
    ACTIVE,
    ENDED_BY_SLURM,
    JOB_PREFIX,
    cancel,
    down_nodes,
    hostnames,
    jobs,
    lease_s,
    node_addresses,
    partition_capacity,
    reap_orphans,
    slurm,
)
from runner.launchers.slurm_job import (
    REPO_ROOT,
    export_names,
    free_port_base,
    plan,
    render_config,
    render_script,
    secret_names,
    verify_layout,
)

RUNTIMES = ("podman", "pyxis", "host")


def pool_operated_by() -> str:
    """`RUNNER_POOL_OPERATED_BY`: `platform` (the default) or `vendor` (a vendor's own
    machines, where only its submissions run; docs/security.md "Vendor commands")."""
    value = os.environ.get("RUNNER_POOL_OPERATED_BY") or "platform"
    if value not in ("platform", "vendor"):
        raise LauncherError(f"RUNNER_POOL_OPERATED_BY={value!r} is not platform or vendor")
    return value


class SlurmLauncher:
    """Submit the job, wait for every task and then the frontend's `/v1/models`, watch the
    tasks while the run measures (`check`), `scancel` at the end."""

    kind = "slurm"

    def __init__(
        self,
        section: contract.SlurmLauncher | Mapping[str, Any],
        *,
        log_dir: str,
        run_id: int | str | None = None,
    ) -> None:
        self.section = read_section(contract.SlurmLauncher, WrittenSlurm, section)
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
        if runtime != "host" and not self.section.image:
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
            "image": self.section.image,
        }
        if self.runtime != "host":
            from agentperf.launchspec import allowed_registries
            from runner.launchers.container import parse_image, podman_global_argv
            from runner.launchers.devices import DevicePool
            from runner.launchers.sandbox import extra_read_only_paths

            # refused here, naming engine.image, when not pinned or from a registry the pool
            # does not allow (podman and pyxis alike); each task (podman) or srun (pyxis)
            # pulls it by digest on its node before it runs
            ref, registry = parse_image(self.section.image or "", allowed_registries())
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
        submitted_at = self.submit()
        deadline = submitted_at + self.section.ready_timeout_s
        states = self._wait_for_tasks(deadline)
        frontend = next(s for s in states if s["role"] == "frontend")
        base_url = f"http://{frontend['host']}:{frontend['port']}/v1"
        models = wait_for_models(base_url, timeout_s=max(1.0, deadline - time.monotonic()))
        layout = self.layout()
        verdict = verify_layout(layout, self.section.accelerators_used)
        if verdict["status"] != "pass":
            raise LauncherError(f"Slurm job {self.job_id}: {verdict['summary']}")
        self.ready_after_s = round(time.monotonic() - submitted_at, 3)
        return Endpoint(
            served_model_name=self.section.served_model_name,
            base_url=base_url,
            # the serving tasks' own counters: the frontend (the pool's router) forwards each
            # request to one of them, and its /metrics is one worker's at most
            metrics_urls=tuple(
                f"http://{s['host']}:{s['port']}" for s in states if s["role"] != "frontend"
            ),
            info={
                "launcher": "slurm",
                # the pinned image each task ran (none with the `host` runtime)
                "image": self.section.image if self.runtime != "host" else None,
                "ready_after_s": self.ready_after_s,
                "models": models,
                "slurm": layout,
            },
        )

    def submit(self) -> float:
        """Plan the job on the partition, write its folder (job document, lease, script),
        start renewing the lease and `sbatch` it; when it was submitted (monotonic)."""
        components = plan(self.section, partition_capacity(self.partition))
        self.components = components
        for sub in ("tasks", "logs"):
            (self.job_dir / sub).mkdir(parents=True, exist_ok=True)
        for stale in (self.job_dir / "tasks").glob("*.json"):
            stale.unlink()
        port_base = int(os.environ.get("RUNNER_SLURM_PORT_BASE") or free_port_base(len(components)))
        job_doc = self.job_document(port_base)
        (self.job_dir / "job.json").write_text(json.dumps(job_doc, indent=1))
        self.renew_lease()
        self.start_renewer()
        self._secrets = [os.environ[n] for n in secret_names(components) if n in os.environ]
        script = render_script(
            job_name=self.job_name,
            job_dir=str(self.job_dir),
            components=components,
            time_limit_min=max(1, math.ceil(self.section.time_limit_s / 60)),
            partition=self.partition,
            account=os.environ.get("RUNNER_SLURM_ACCOUNT"),
            runtime=self.runtime,
            image=job_doc["image"],  # checked (parse_image) for every runtime but host
            frontend_constraint=os.environ.get("RUNNER_SLURM_FRONTEND_CONSTRAINT"),
            export=export_names(components),
        )
        path = self.job_dir / "job.sbatch"
        path.write_text(script)
        submitted_at = self.submitted_at = time.monotonic()
        self.job_id = slurm(["sbatch", "--parsable", str(path)]).strip().split(";")[0]
        self.frontend_port = port_base
        return submitted_at

    def _wait_for_tasks(self, deadline: float) -> list[dict[str, Any]]:
        """Every task's state once all are ready; a LauncherError when one ended (`check`)
        or not all were ready by `deadline`."""
        expected = sum(int(c["tasks"]) for c in self.components)
        while True:
            self.check()
            states = self.task_states()
            if len(states) == expected and all(s["state"] == "ready" for s in states):
                return states
            if time.monotonic() > deadline:
                pending = [f"{s['role']}-{s['rank']} on {s['node']}: {s['state']}" for s in states]
                raise LauncherError(
                    f"Slurm job {self.job_id}: not every task was ready within "
                    f"{float(self.section.ready_timeout_s):g} s "
                    f"({len(states)} of {expected} started; {pending})"
                )
            time.sleep(0.25)

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
                "used": self.section.accelerators_used,
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
