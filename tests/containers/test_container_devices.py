"""The container launcher gives the served process exactly the granted devices, the pool's
/dev/shm size and memlock limit, and reports the image as Podman resolved it
(runner/launchers/devices.py, docs/security.md "Devices"; real Podman).

No GPU here: the host's /dev/null and /dev/zero (real character devices) stand in for a
GPU's node and NVIDIA's control node, bound at /dev/nvidia0 and /dev/nvidiactl.
"""

from __future__ import annotations

import json
import resource

from runner.launchers.base import http_get
from runner.launchers.container import ContainerLauncher, podman_run_argv
from runner.launchers.devices import Accelerator, DeviceGrant, host_memlock
from tests.support.probes import answering

# Runs in the image (its Python): answers /v1/models with what it sees.
PROBE = answering(
    """
import os, resource
shm = os.statvfs("/dev/shm")
seen = {"dev": sorted(os.listdir("/dev")), "shm_bytes": shm.f_blocks * shm.f_frsize,
        "memlock": resource.getrlimit(resource.RLIMIT_MEMLOCK)}
"""
)


def test_a_container_sees_exactly_the_granted_devices_and_its_resolved_image(pool_host, tmp_path):
    gpu = Accelerator(entry="/dev/nvidia0", vendor="nvidia", nodes=(("/dev/null", "/dev/nvidia0"),), minor=0)  # fmt: skip
    spare = Accelerator(entry="/dev/nvidia1", vendor="nvidia", nodes=(("/dev/full", "/dev/nvidia1"),), minor=1)  # fmt: skip
    grant = DeviceGrant(
        workers=((gpu,),),
        shared=(("/dev/zero", "/dev/nvidiactl"),),
        shm_bytes=256 * 2**20,
        memlock_bytes=host_memlock(),  # this test host's runner may not raise its own
    )
    del spare  # declared by the pool, not granted: it must not appear inside
    config = {
        "kind": "container",
        "image": pool_host,
        "command": ["python", "-c", PROBE],
        "env": {},
        "port": 18501,
        "ready_timeout_s": 60,
        "served_model_name": "probe",
    }
    launcher = ContainerLauncher(config, log_dir=str(tmp_path / "logs"), run_id="devices")
    launcher.devices = grant
    argv = podman_run_argv(launcher.spec(pool_host, ["python"], []))
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--device"] == [
        "/dev/null:/dev/nvidia0",
        "/dev/zero:/dev/nvidiactl",
    ]
    assert argv[argv.index("--shm-size") + 1] == f"{256 * 2**20}b"
    try:
        endpoint = launcher.start()
        body = json.loads(
            http_get(endpoint.base_url + "/models", timeout_s=10, connect=endpoint.connect)
        )
    finally:
        launcher.stop()
    seen = body["seen"]
    assert [n for n in seen["dev"] if n.startswith("nvidia")] == ["nvidia0", "nvidiactl"]
    assert seen["shm_bytes"] == 256 * 2**20
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    assert seen["memlock"] == [hard, hard]
    # the runtime as Podman resolved it, for the inventory (runner/worker/host_inventory.py)
    runtime = endpoint.info["runtime"]
    digest = pool_host.rpartition("@")[2]
    assert runtime["image_digest"] == digest, runtime
    assert runtime["user"] == "65534:65534"
    assert runtime["entrypoint"][:2] == ["python", "-c"]
