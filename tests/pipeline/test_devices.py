"""The accelerators a pool declares reach a launched server, exactly the granted ones
(runner/launchers/devices.py, docs/security.md "Devices").

No GPU here: real files stand in for the device nodes and for /proc/driver/nvidia (the
stand-ins are ordinary files bound by the real bubblewrap), and a CDI spec written in the
format `nvidia-ctk cdi generate` documents points at them. What a real GPU does inside the
sandbox is benchmarks/gpu_launch.py's to show.
"""

from __future__ import annotations

import dataclasses
import json
import resource
import textwrap

import pytest
import yaml

from runner.launchers import devices
from runner.launchers.base import LauncherError
from runner.launchers.devices import DevicePool, parse_size
from runner.launchers.sandbox import Sandbox

# What the program inside the sandbox reports: /dev, the GPUs /proc/driver lists, the
# memlock limit, /dev/shm's size, and whether /sys and /proc/driver can be written.
PROBE = textwrap.dedent(
    """
    import json, os, resource
    def writable(path):
        try:
            open(path, "w").close()
            return True
        except OSError:
            return False
    gpus = "/proc/driver/nvidia/gpus"
    shm = os.statvfs("/dev/shm")
    print("SEEN " + json.dumps({
        "dev": sorted(os.listdir("/dev")),
        "gpus": sorted(os.listdir(gpus)) if os.path.isdir(gpus) else None,
        "sys": os.path.isdir("/sys/class"),
        "write_sys": writable("/sys/agentperf"),
        "write_proc_driver": writable("/proc/driver/agentperf"),
        "memlock": resource.getrlimit(resource.RLIMIT_MEMLOCK),
        "shm_bytes": shm.f_blocks * shm.f_frsize,
    }), flush=True)
    """
)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """Stand-ins of an 4-GPU NVIDIA host: nodes, a CDI spec, /proc/driver/nvidia/gpus."""
    root = tmp_path_factory.mktemp("gpuhost")
    nodes = root / "dev"
    nodes.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm",
                 "nvidia-uvm-tools"):  # fmt: skip
        (nodes / name).write_text(name)
        (nodes / name).chmod(0o666)
    gpus = root / "proc_driver" / "nvidia" / "gpus"
    for minor in range(4):
        folder = gpus / f"0000:0{minor + 1}:00.0"
        folder.mkdir(parents=True)
        (folder / "information").write_text(
            f"Model: \t\t NVIDIA H200\nIRQ:   \t\t 100\nGPU UUID: \t GPU-{minor:08d}\n"
            f"Bus Location: \t 0000:0{minor + 1}:00.0\nDevice Minor: \t {minor}\n"
        )
    cdi = root / "cdi"
    cdi.mkdir()
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [
            {
                "name": str(minor),
                "containerEdits": {
                    "deviceNodes": [
                        {"path": f"/dev/nvidia{minor}", "hostPath": str(nodes / f"nvidia{minor}")}
                    ]
                },
            }
            for minor in range(4)
        ],
        "containerEdits": {
            "deviceNodes": [
                {"path": f"/dev/{name}", "hostPath": str(nodes / name)}
                for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
            ],
            "mounts": [],
        },
    }
    (cdi / "nvidia.yaml").write_text(yaml.safe_dump(spec))
    return root


def _pool(host, devices: str, **env: str) -> DevicePool:
    pool = DevicePool.from_env(
        {"RUNNER_DEVICES": devices, "RUNNER_CDI_SPEC_DIRS": str(host / "cdi"), **env}
    )
    return dataclasses.replace(pool, proc_driver=str(host / "proc_driver"))


def _seen(tmp_path, name: str, grant) -> dict:
    sandbox = Sandbox(
        work_dir=str(tmp_path / name), env={}, read_only=[], serves=False, devices=grant
    )
    log_path = tmp_path / f"{name}.log"
    with open(log_path, "wb") as log:
        process = sandbox.start(["python", "-c", PROBE], log=log)
        assert process.wait(timeout=60) == 0, log_path.read_text()
    sandbox.stop()
    line = next(x for x in log_path.read_text().splitlines() if x.startswith("SEEN "))
    return json.loads(line.removeprefix("SEEN "))


def test_a_sandbox_sees_exactly_the_granted_gpus_and_nothing_else(host, tmp_path):
    """Two of the pool's four GPUs (one engine worker of two): inside the real bubblewrap,
    /dev holds the minimal set plus exactly those two and the shared control nodes, and
    /proc/driver lists only their two GPUs; /sys and /proc/driver are read-only."""
    four = "nvidia.com/gpu=2,nvidia.com/gpu=3,nvidia.com/gpu=0,nvidia.com/gpu=1"
    assert _pool(host, four).memlock_bytes is None  # accelerators: unlimited by default
    # this test host's runner may not raise its own 8 MiB limit (no CAP_SYS_RESOURCE), so
    # the pool sets one below it here
    grant = _pool(host, four, RUNNER_MEMLOCK="4m").grant([2])
    bare = _seen(tmp_path, "bare", DevicePool().grant([]))
    seen = _seen(tmp_path, "gpus", grant)
    assert set(seen["dev"]) - set(bare["dev"]) == {
        "nvidia2",
        "nvidia3",
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
    }
    assert set(bare["dev"]) - set(seen["dev"]) == set()
    assert not any(name.startswith("nvidia") for name in bare["dev"])
    assert seen["gpus"] == ["0000:03:00.0", "0000:04:00.0"]  # minors 2 and 3 only
    assert bare["gpus"] is None and bare["sys"] is False  # no accelerators: no /sys either
    assert seen["sys"] is True
    assert seen["write_sys"] is False and seen["write_proc_driver"] is False
    # the pool's sizes: 1 GiB /dev/shm by default; memlock as set, else the runner's own
    assert seen["shm_bytes"] == bare["shm_bytes"] == 2**30
    assert seen["memlock"] == [4 * 2**20] * 2
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    assert bare["memlock"] == [hard, hard]


def test_device_nodes_sized_shm_and_memlock_from_the_pool_settings(host, tmp_path):
    nodes = host / "dev"
    # a declared node must sit under /dev: the stand-in path is refused by name...
    with pytest.raises(LauncherError, match="not a device node under /dev"):
        DevicePool.from_env({"RUNNER_DEVICES": str(nodes / "nvidia1")})
    # ...so the node entry is tested on its argv and the stand-ins through the grant's nodes
    pool = DevicePool.from_env(
        {
            "RUNNER_DEVICES": "/dev/nvidia1,/dev/nvidia0+/dev/nvidia-caps",
            "RUNNER_SHARED_DEVICES": "/dev/nvidiactl",
            "RUNNER_SHM_SIZE": "256m",
            "RUNNER_MEMLOCK": "2m",
        }
    )
    assert [a.minor for a in pool.accelerators] == [1, 0]
    assert pool.shm_bytes == 256 * 2**20 and pool.memlock_bytes == 2 * 2**20
    grant = pool.grant([1])
    assert grant.podman_args() == [
        "--device",
        "/dev/nvidia1:/dev/nvidia1",
        "--device",
        "/dev/nvidiactl:/dev/nvidiactl",
        f"--shm-size={256 * 2**20}b",
        "--ulimit",
        f"memlock={2 * 2**20}:{2 * 2**20}",
    ]
    with pytest.raises(LauncherError, match="/dev/nvidia1 declared by the pool does not exist"):
        grant.bwrap_args()  # this host has no /dev/nvidia1: refused, never skipped
    # the same grant with stand-in nodes, in the real sandbox
    accelerator = dataclasses.replace(
        grant.accelerators[0], nodes=((str(nodes / "nvidia1"), "/dev/nvidia1"),)
    )
    stand_in = dataclasses.replace(
        grant,
        workers=((accelerator,),),
        shared=((str(nodes / "nvidiactl"), "/dev/nvidiactl"),),
        proc_driver=str(host / "proc_driver"),
    )
    argv = stand_in.bwrap_args()
    assert [argv[i + 2] for i, a in enumerate(argv) if a == "--dev-bind"] == [
        "/dev/nvidia1",
        "/dev/nvidiactl",
    ]
    seen = _seen(tmp_path, "nodes", stand_in)
    assert sorted(n for n in seen["dev"] if n.startswith("nvidia")) == ["nvidia1", "nvidiactl"]
    assert seen["gpus"] == ["0000:02:00.0"]
    assert seen["shm_bytes"] == 256 * 2**20 and seen["memlock"] == [2 * 2**20] * 2


def test_the_podman_devices_of_a_cdi_grant_are_the_cdi_names_per_worker(host):
    pool = _pool(host, ",".join(f"nvidia.com/gpu={i}" for i in range(4)))
    grant = pool.grant([2, 2])  # two engine workers of two accelerators each
    assert [[a.cdi for a in group] for group in grant.workers] == [
        ["nvidia.com/gpu=0", "nvidia.com/gpu=1"],
        ["nvidia.com/gpu=2", "nvidia.com/gpu=3"],
    ]
    # the CDI spec brings its own control nodes: Podman gets the names and nothing else
    assert grant.podman_devices() == [f"nvidia.com/gpu={i}" for i in range(4)]
    assert [n for _, n in grant.nodes()] == [
        "/dev/nvidia0",
        "/dev/nvidia1",
        "/dev/nvidia2",
        "/dev/nvidia3",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    assert grant.describe()["workers"][1][0]["nodes"] == ["/dev/nvidia2"]


def test_a_topology_larger_than_the_pool_and_bad_declarations_are_refused(host):
    pool = _pool(host, "nvidia.com/gpu=0,nvidia.com/gpu=1")
    with pytest.raises(LauncherError, match=r"needs 3 accelerators \(2 \+ 1 per worker\).*2 in"):
        pool.grant([2, 1])
    # a CPU host declares nothing and gives nothing
    assert DevicePool.from_env({}).grant([8]).accelerators == []
    unknown = _pool(host, "nvidia.com/gpu=7").grant([1])
    with pytest.raises(LauncherError, match=r"'nvidia.com/gpu=7' is in no CDI spec"):
        unknown.bwrap_args()
    assert unknown.podman_devices() == ["nvidia.com/gpu=7"]  # Podman resolves CDI itself
    for env, message in (
        ({"RUNNER_DEVICES": "gpu0"}, "not a CDI name"),
        ({"RUNNER_DEVICES": "/dev/nvidia0,/dev/nvidia0"}, r"\['/dev/nvidia0'\] more than once"),
        ({"RUNNER_SHM_SIZE": "lots"}, "RUNNER_SHM_SIZE='lots'"),
        ({"RUNNER_MEMLOCK": "0"}, "RUNNER_MEMLOCK='0'"),
    ):
        with pytest.raises(LauncherError, match=message):
            DevicePool.from_env(env)
    assert parse_size("x", "16g") == 16 * 2**30
    assert parse_size("x", "unlimited", unlimited=True) is None
    amd = DevicePool.from_env({"RUNNER_DEVICES": "/dev/dri/renderD128,/dev/dri/renderD129"})
    assert [a.vendor for a in amd.accelerators] == ["amd", "amd"]


def test_an_unlimited_memlock_the_runner_may_not_raise_is_refused(host, tmp_path):
    grant = _pool(host, "nvidia.com/gpu=0").grant([1])
    assert grant.memlock_bytes is None
    if resource.getrlimit(resource.RLIMIT_MEMLOCK)[1] == resource.RLIM_INFINITY:
        grant.memlock_preflight()  # nothing to raise
    elif devices._may_raise_limits():  # a root runner with CAP_SYS_RESOURCE: it is raised
        assert _seen(tmp_path, "unlimited", grant)["memlock"] == [-1, -1]
    else:  # this test machine's runner: refused with the reason, never left lower
        with pytest.raises(LauncherError, match="lacks CAP_SYS_RESOURCE"):
            grant.memlock_preflight()


def test_dispatch_gives_a_launched_server_one_group_per_engine_worker():
    """runs.dispatch.accelerators: the run spec says each engine worker's
    accelerators_per_worker, which the pool worker grants (RunDirector._grant_devices)."""
    from agentperf import contract
    from catalog.models import HardwareSystem
    from runs.dispatch import accelerators
    from submissions.models import Submission

    roles = [
        {"name": "prefill", "workers": 2, "accelerators_per_worker": 1},
        {"name": "decode", "workers": 1, "accelerators_per_worker": 2},
    ]
    submission = Submission(
        config={"topology": {"roles": roles, "accelerators_used": 4}},
        hardware=HardwareSystem(accelerators_per_system=8),
    )
    launched = accelerators(submission, {"kind": "container"})
    assert launched == {"used": 4, "total": 8, "per_worker": [1, 1, 2]}
    assert contract.Accelerators.model_validate(launched).per_worker == [1, 1, 2]
    # nothing is launched for a simulated run: no groups
    assert "per_worker" not in accelerators(submission, {"kind": "simulated"})
    pool = DevicePool.from_env({"RUNNER_DEVICES": ",".join(f"/dev/nvidia{i}" for i in range(8))})
    grant = pool.grant(launched["per_worker"])
    assert [[a.entry for a in group] for group in grant.workers] == [
        ["/dev/nvidia0"],
        ["/dev/nvidia1"],
        ["/dev/nvidia2", "/dev/nvidia3"],
    ]
