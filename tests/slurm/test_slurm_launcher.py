"""The `slurm` launcher against a real slurmctld and three slurmd (tests/slurm/cluster.py):
two llama.cpp servers (the tiny GGUF) as the workers of one heterogeneous job, Debian's nginx
as the round-robin frontend; a killed task fails the run naming task, node and exit code and
cancels the job; stop (the end of a run, a withdraw) cancels it; a topology the partition
cannot hold is refused before anything is queued; a job whose runner stopped renewing its
lease ends by itself and the reaper cancels it by name.

The GPUs are stand-in character devices (tests/slurm/cluster.py `stand_in_gpus`; there is no
GPU here): what is real is Slurm's allocation of them to tasks (`SLURM_STEP_GPUS`, from a
real gres.conf) and, with Podman, the device nodes each task's container is given.

Most tests run the commands with the `host` runtime, which only a vendor's own pool may use
(`RUNNER_POOL_OPERATED_BY=vendor`, set for this module); the tests of the pinned image set
`podman`, and one checks that a platform pool refuses `host`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from runner.launchers.base import LauncherError
from runner.launchers.slurm import SlurmLauncher
from runner.launchers.slurm_cluster import active_jobs, jobs, reap_orphans
from runner.launchers.tiny_gguf import tiny_gguf
from tests.support.probes import answering

pytestmark = [pytest.mark.slow, pytest.mark.llamacpp]


def wait_until(predicate, *, timeout_s: float, what: str):
    """Poll `predicate` until it returns something truthy (an event with a deadline)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout_s:g} s")


@pytest.fixture(scope="module", autouse=True)
def vendor_pool_host_runtime():
    """This module's commands run bare on the nodes: a vendor's own pool."""
    saved = {k: os.environ.get(k) for k in ("RUNNER_SLURM_RUNTIME", "RUNNER_POOL_OPERATED_BY")}
    os.environ.update(RUNNER_SLURM_RUNTIME="host", RUNNER_POOL_OPERATED_BY="vendor")
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def llama_role(workers: int, per_worker: int) -> dict:
    command = [
        sys.executable,
        "-m",
        "runner.launchers.llamacpp_server",
        "--model",
        str(tiny_gguf(seed=0)),
        "--port",
        "${PORT}",
        "--alias",
        "tiny",
        "--parallel",
        "1",
        "--ctx-per-slot",
        "2048",
    ]
    return {
        "name": "both",
        "workers": workers,
        "accelerators_per_worker": per_worker,
        "command": command,
        "env": {},
    }


def models_role(tmp_path: Path) -> dict:
    """A real HTTP server that answers /v1/models (python -m http.server over a folder)."""
    folder = tmp_path / "static"
    (folder / "v1").mkdir(parents=True, exist_ok=True)
    (folder / "v1" / "models").write_text(json.dumps({"data": [{"id": "tiny"}]}))
    (folder / "health").write_text("ok")
    command = [sys.executable, "-m", "http.server", "${PORT}", "--directory", str(folder)]
    return {"name": "both", "workers": 1, "accelerators_per_worker": 1, "command": command}


def config(role: dict, used: int) -> dict:
    return {
        "kind": "slurm",
        "served_model_name": "tiny",
        "ready_timeout_s": 180,
        "time_limit_s": 900,
        "accelerators_used": used,
        "roles": [role],
    }


def started(launcher: SlurmLauncher):
    """``launcher.start()``, or a failure that shows the end of the job's logs."""
    try:
        return launcher.start()
    except LauncherError as exc:
        raise AssertionError(f"{exc}\n{launcher.log_bytes()[-3000:].decode()}") from exc


def job_gone(name: str) -> bool:
    return not active_jobs(name)


@pytest.fixture(scope="module")
def deployment(slurm_cluster, tmp_path_factory):
    """Two llama.cpp workers of 2 GPUs each (a node each) behind nginx, in one job."""
    launcher = SlurmLauncher(
        config(llama_role(2, 2), 4), log_dir=str(tmp_path_factory.mktemp("slurm")), run_id="t1"
    )
    started = time.monotonic()
    endpoint = launcher.start()
    print(f"slurm: dispatch to frontend ready in {time.monotonic() - started:.1f} s")
    yield launcher, endpoint
    launcher.stop()


def test_two_workers_on_two_nodes_behind_the_router(deployment):
    launcher, endpoint = deployment
    layout = endpoint.info["slurm"]
    workers = [t for t in layout["tasks"] if t["role"] == "both"]
    assert sorted(t["node"] for t in workers) == ["node2", "node3"]
    assert all(t["gpus"] == 2 and t["state"] == "ready" for t in workers)
    assert layout["accelerators"] == {"used": 4, "given": 4}
    assert layout["router"] == "nginx"
    assert {n["node"] for n in layout["nodes"]} == {"node1", "node2", "node3"}
    assert all(n["inventory"]["machine"]["kernel"] for n in layout["nodes"])
    # the job is named after the run, with the time limit asked for
    (job,) = [j for j in jobs(launcher.job_name) if j.get("het_job_offset") == 0]
    assert job["job_state"] == "RUNNING" and job["time_limit"] == 15
    # round-robin: consecutive requests reach both workers
    upstreams = set()
    for _ in range(4):
        with urllib.request.urlopen(f"{endpoint.base_url}/models", timeout=10) as response:
            assert json.loads(response.read())["data"][0]["id"] == "tiny"
            upstreams.add(response.headers["X-Upstream"])
    ports = {f"127.0.0.1:{t['port']}" for t in launcher.task_states() if t["role"] == "both"}
    assert upstreams == ports
    body = json.dumps(
        {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    ).encode()
    request = urllib.request.Request(
        f"{endpoint.base_url}/chat/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert json.loads(response.read())["usage"]["completion_tokens"] == 4
    launcher.check()  # every task alive: no error


def test_a_killed_task_fails_the_run_naming_it_and_cancels_the_job(deployment):
    launcher, _ = deployment
    victim = next(t for t in launcher.task_states() if t["role"] == "both" and t["rank"] == 1)
    os.kill(int(victim["pid"]), signal.SIGKILL)

    def failure():
        try:
            launcher.check()
        except LauncherError as exc:
            return str(exc)
        return None

    message = wait_until(failure, timeout_s=30, what="the launcher saw the dead task")
    assert f"task both-1 on node {victim['node']} exited with code 137" in message
    wait_until(lambda: job_gone(launcher.job_name), timeout_s=30, what="the job was cancelled")


def test_stop_cancels_the_job(slurm_cluster, tmp_path, monkeypatch):
    """What the worker does at the end of a run and on a withdraw (RunCancelled → stop).
    The job gets SLURM_* and the names the launcher exports, not the worker's environment
    (its credentials); the declared secret reaches the task and is redacted from the logs."""
    monkeypatch.setenv("AGENTPERF_TEST_SECRET", "worker-credential-7f3a")
    monkeypatch.setenv("AGENTPERF_DECLARED", "declared-secret-91c2")
    role = models_role(tmp_path)
    role["env"] = {"AGENTPERF_DECLARED": {"secret": True}}
    # the task prints the declared secret, then serves
    role["command"] = ["sh", "-c", 'echo "token=$AGENTPERF_DECLARED"; exec "$@"', "sh"] + role[
        "command"
    ]
    launcher = SlurmLauncher(config(role, 1), log_dir=str(tmp_path), run_id="t2")
    launcher.start()
    assert active_jobs(launcher.job_name)
    (worker,) = [s for s in launcher.task_states() if s["role"] == "both"]
    # the task wrapper (runner/launchers/slurm_task.py) is the served command's parent
    status = Path(f"/proc/{worker['pid']}/status").read_text()
    wrapper = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
    environ = Path(f"/proc/{wrapper}/environ").read_bytes().split(b"\0")
    names = {item.partition(b"=")[0].decode() for item in environ if item}
    assert "AGENTPERF_TEST_SECRET" not in names
    assert {"AGENTPERF_DECLARED", "SLURM_CONF", "PATH", "SLURM_JOB_ID"} <= names
    wait_until(
        lambda: b"token=" in launcher.log_bytes(), timeout_s=30, what="the task's log is written"
    )
    logs = launcher.log_bytes()
    assert b"token=[secret]" in logs and b"declared-secret-91c2" not in logs
    launcher.stop()
    wait_until(lambda: job_gone(launcher.job_name), timeout_s=30, what="squeue shows it gone")


def test_an_unpinned_image_is_refused_for_pyxis_too(slurm_cluster, tmp_path, monkeypatch):
    """The registry allow-list and digest pin hold for every runtime that runs the image."""
    monkeypatch.setenv("RUNNER_SLURM_RUNTIME", "pyxis")
    monkeypatch.setenv("RUNNER_REGISTRIES", "registry.example.org")
    launcher = SlurmLauncher(
        {**config(models_role(tmp_path), 1), "image": "registry.example.org/engine:latest"},
        log_dir=str(tmp_path),
        run_id="t8",
    )
    with pytest.raises(LauncherError) as caught:
        launcher.start()
    assert str(caught.value).startswith("engine.image:"), caught.value
    assert jobs(launcher.job_name) == []  # nothing was queued


@pytest.mark.parametrize(
    ("workers", "per_worker", "field"),
    [
        (3, 2, "topology.roles.0.workers"),  # 3 nodes of workers + the frontend > 3 nodes
        (1, 3, "topology.roles.0.accelerators_per_worker"),  # 3 GPUs: not whole 2-GPU nodes
    ],
)
def test_a_topology_the_partition_cannot_hold_is_refused_before_queueing(
    slurm_cluster, tmp_path, workers, per_worker, field
):
    launcher = SlurmLauncher(
        config(llama_role(workers, per_worker), workers * per_worker),
        log_dir=str(tmp_path),
        run_id=f"t3-{workers}-{per_worker}",
    )
    with pytest.raises(LauncherError) as caught:
        launcher.start()
    assert str(caught.value).startswith(f"{field}:"), caught.value
    assert jobs(launcher.job_name) == []  # nothing was queued


def test_the_job_never_outlives_its_runner(slurm_cluster, tmp_path, monkeypatch):
    """A live runner keeps its job through a trial far longer than the lease, without
    check() (the lease thread renews it); a worker SIGKILLed cannot scancel: its lease goes
    stale, the job's own watchdog ends the job, and the reaper cancels such a job by name
    even sooner. The renewer is stopped to stand for the dead runner."""
    monkeypatch.setenv("RUNNER_SLURM_LEASE_S", "3")
    launcher = SlurmLauncher(config(models_role(tmp_path), 1), log_dir=str(tmp_path), run_id="t4")
    launcher.start()
    lease = launcher.job_dir / "lease"
    started = time.time()
    # two of the watchdog's 5 s polls after start() without check(): renewed all along
    wait_until(
        lambda: lease.stat().st_mtime > started + 11,
        timeout_s=30,
        what="the lease thread renewed the lease past two watchdog polls",
    )
    assert active_jobs(launcher.job_name)
    out = "".join(p.read_text() for p in (launcher.job_dir / "logs").glob("job-*.out"))
    assert "runner lease stale" not in out
    launcher.stop_renewer()  # the runner died
    os.utime(lease, (time.time() - 30, time.time() - 30))
    assert reap_orphans(stale_s=10) == [launcher.job_name]
    wait_until(lambda: job_gone(launcher.job_name), timeout_s=30, what="the reaper ended it")

    again = SlurmLauncher(config(models_role(tmp_path), 1), log_dir=str(tmp_path), run_id="t5")
    again.start()
    again.stop_renewer()  # the runner died
    os.utime(again.job_dir / "lease", (0, 0))
    wait_until(lambda: job_gone(again.job_name), timeout_s=40, what="the watchdog ended it")
    out = "".join(p.read_text() for p in (again.job_dir / "logs").glob("job-*.out"))
    assert "runner lease stale" in out


def test_tasks_run_the_pinned_image_with_podman(slurm_cluster, tmp_path, monkeypatch):
    """The pool's runtime is Podman: each worker task pulls the pinned image by digest from
    the session registry and runs the llama.cpp server in it (the container launcher's
    isolation, the node's network), behind the router."""
    from tests.support.container_image import pushed_llamacpp_image, registry_url

    image = pushed_llamacpp_image()
    model = tiny_gguf(seed=0)
    monkeypatch.setenv("RUNNER_SLURM_RUNTIME", "podman")
    monkeypatch.delenv("RUNNER_POOL_OPERATED_BY")  # a platform pool
    monkeypatch.setenv("RUNNER_REGISTRIES", registry_url())
    monkeypatch.setenv("RUNNER_SANDBOX_RO_PATHS", str(model.parent))
    monkeypatch.setenv("RUNNER_CONTAINER_MEMORY", "1g")
    role = llama_role(2, 2)
    role["command"] = ["python", *role["command"][1:]]  # the image's Python
    launcher = SlurmLauncher(
        {**config(role, 4), "image": image}, log_dir=str(tmp_path), run_id="t6"
    )
    try:
        endpoint = started(launcher)
        assert endpoint.info["slurm"]["runtime"] == "podman"
        with urllib.request.urlopen(f"{endpoint.base_url}/models", timeout=10) as response:
            assert json.loads(response.read())["data"][0]["id"] == "tiny"
        job = json.loads((launcher.job_dir / "job.json").read_text())
        assert job["image"] == image and job["pull"][-1] == image
        states = [s for s in launcher.task_states() if s["role"] == "both"]
        assert all(s["command"] == [job["podman"][0]] for s in states)
        # each worker's container was given its node's two stand-in GPUs, as Slurm allocated
        for state in states:
            (given,) = state["devices"]["workers"]
            assert sorted(state["gpus"]) == ["0", "1"]
            assert [d["nodes"] for d in given] == [["/dev/nvidia0"], ["/dev/nvidia1"]]
    finally:
        launcher.stop()
    wait_until(lambda: job_gone(launcher.job_name), timeout_s=30, what="the job was cancelled")

    def containers_left() -> list[str]:
        listed = subprocess.run(
            [
                *job["podman"],
                "ps",
                "--all",
                "--quiet",
                "--filter",
                f"label=agentperf.run={launcher.job_name}",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return listed.stdout.split()

    # the containers run under conmon, outside the job's processes: gone with the job too
    wait_until(lambda: not containers_left(), timeout_s=30, what="the containers were removed")


def test_a_node_that_drops_fails_the_run_naming_it(tmp_path, monkeypatch):
    """A cluster of its own (its slurmd are killed): the worker node's slurmd dies, Slurm marks
    the node down after SlurmdTimeout and ends the job (NODE_FAIL); check() names it."""
    from tests.slurm.cluster import start_slurm

    cluster = start_slurm()
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    try:
        launcher = SlurmLauncher(
            config(models_role(tmp_path), 1), log_dir=str(tmp_path), run_id="t7"
        )
        launcher.start()
        (worker,) = [t for t in launcher.task_states() if t["role"] == "both"]
        slurmd = next(p for p in cluster.processes if p.args[-1] == worker["node"])
        slurmd.kill()

        def failure():
            try:
                launcher.check()
            except LauncherError as exc:
                return str(exc)
            return None

        message = wait_until(failure, timeout_s=90, what="the launcher saw the node drop")
        assert f"node {worker['node']} dropped" in message and "NODE_FAIL" in message, message
        launcher.stop()
    finally:
        cluster.stop()


# Runs in the image (its Python): answers every GET with the GPU nodes and the device
# variables its container sees (each node's major/minor tells which stand-in it is).
GPU_PROBE = answering(
    """
import os
nodes = sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))
rdev = {n: os.stat("/dev/" + n).st_rdev for n in nodes}
seen = {
    "nvidia": {n: [os.major(d), os.minor(d)] for n, d in rdev.items()},
    "env": {k: os.environ.get(k) for k in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")},
}
""",
    model="tiny",
    host="0.0.0.0",
)


def test_each_podman_task_is_given_exactly_the_gpus_slurm_allocated_it(
    slurm_cluster, tmp_path, monkeypatch
):
    """Two workers of one GPU share a node of two: Slurm allocates each task one GPU index
    of the node's gres.conf (real stand-in device nodes), and each task's container has
    that one node at /dev/nvidiaN, the other GPU absent, NVIDIA_VISIBLE_DEVICES naming it
    (so a legacy nvidia hook adds nothing else) and no CUDA_VISIBLE_DEVICES of the host's
    numbering (runner/launchers/slurm_devices.py)."""
    from tests.slurm.cluster import STAND_IN_DEVICES
    from tests.support.container_image import pushed_llamacpp_image, registry_url

    image = pushed_llamacpp_image()
    monkeypatch.setenv("RUNNER_SLURM_RUNTIME", "podman")
    monkeypatch.delenv("RUNNER_POOL_OPERATED_BY")  # a platform pool
    monkeypatch.setenv("RUNNER_REGISTRIES", registry_url())
    monkeypatch.setenv("RUNNER_CONTAINER_MEMORY", "512m")
    role = {
        "name": "both",
        "workers": 2,
        "accelerators_per_worker": 1,
        "command": ["python", "-c", GPU_PROBE],
        "env": {},
    }
    launcher = SlurmLauncher(
        {**config(role, 2), "image": image}, log_dir=str(tmp_path), run_id="t9"
    )
    try:
        endpoint = started(launcher)
        states = [s for s in launcher.task_states() if s["role"] == "both"]
        assert len(states) == 2 and len({s["node"] for s in states}) == 1  # one node, 2 GPUs
        given: dict[int, dict] = {}
        for state in states:
            (gpu,) = state["gpus"]
            url = f"http://127.0.0.1:{state['port']}/v1/models"
            with urllib.request.urlopen(url, timeout=10) as response:
                seen = json.loads(response.read())["seen"]
            index = int(gpu)
            assert seen["nvidia"] == {f"nvidia{index}": list(STAND_IN_DEVICES[index])}, seen
            assert seen["env"] == {
                "NVIDIA_VISIBLE_DEVICES": str(index),
                "CUDA_VISIBLE_DEVICES": None,
            }
            given[index] = state["devices"]
        assert sorted(given) == [0, 1]  # each GPU to one task, none to both
        tasks = [t for t in endpoint.info["slurm"]["tasks"] if t["role"] == "both"]
        inside = sorted(
            d["nodes"] for t in tasks for group in t["devices"]["workers"] for d in group
        )
        assert inside == [["/dev/nvidia0"], ["/dev/nvidia1"]]
    finally:
        launcher.stop()
    wait_until(lambda: job_gone(launcher.job_name), timeout_s=30, what="the job was cancelled")


def test_a_task_whose_gpus_the_node_cannot_name_fails_the_launch_naming_the_index(
    slurm_cluster, tmp_path, monkeypatch
):
    """The pool declares one GPU per node (`RUNNER_SLURM_GPUS`) where Slurm's gres.conf has
    two: the task Slurm gives GPU 1 does not start, and the launch fails naming the index
    and the declaration, never running on a device it was not given."""
    from tests.support.container_image import pushed_llamacpp_image, registry_url

    image = pushed_llamacpp_image()
    monkeypatch.setenv("RUNNER_SLURM_RUNTIME", "podman")
    monkeypatch.delenv("RUNNER_POOL_OPERATED_BY")
    monkeypatch.setenv("RUNNER_REGISTRIES", registry_url())
    monkeypatch.setenv("RUNNER_SLURM_GPUS", "nvidia.com/gpu=0")
    role = {
        "name": "both",
        "workers": 1,
        "accelerators_per_worker": 2,
        "command": ["python", "-c", GPU_PROBE],
        "env": {},
    }
    launcher = SlurmLauncher(
        {**config(role, 2), "image": image}, log_dir=str(tmp_path), run_id="t11"
    )
    try:
        with pytest.raises(LauncherError) as caught:
            launcher.start()
    finally:
        launcher.stop()
    message = str(caught.value)
    assert "exited with code 126" in message, message
    assert "Slurm allocated GPU 1 on node" in message and "RUNNER_SLURM_GPUS lists 1" in message
    wait_until(lambda: job_gone(launcher.job_name), timeout_s=30, what="the job was cancelled")


def test_a_platform_pool_refuses_the_host_runtime_and_an_image_less_launch(
    slurm_cluster, tmp_path, monkeypatch
):
    """`host` would run the vendor's command bare on the nodes with every GPU: refused on a
    platform pool before anything is queued; Podman without the config's image is refused
    naming engine.image (the submission refuses it first: tests/submissions/
    test_early_refusals.py)."""
    monkeypatch.delenv("RUNNER_POOL_OPERATED_BY")
    launcher = SlurmLauncher(config(models_role(tmp_path), 1), log_dir=str(tmp_path), run_id="t10")
    with pytest.raises(LauncherError, match="RUNNER_SLURM_RUNTIME=host runs the vendor's command"):
        launcher.start()
    monkeypatch.setenv("RUNNER_SLURM_RUNTIME", "podman")
    with pytest.raises(LauncherError) as caught:
        launcher.start()
    assert str(caught.value).startswith("engine.image: a Slurm launch runs each task"), caught.value
    assert jobs(launcher.job_name) == []  # nothing was queued
