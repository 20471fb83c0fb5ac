"""Collecting the inventory on the pool host (runner/worker/host_inventory.py,
docs/verification.md "inventory").

NVML is the one fake here: no GPU or NVIDIA driver on this machine, so ``FakeNvml`` stands in
for the ``pynvml`` module (the same calls, answers of an 4-GPU H200 host). The
``nvidia-smi -q -x`` path parses a fixture written from NVIDIA's documented element names
(tests/verification/fixtures/nvidia-smi-q-x.xml), printed by a real subprocess; the machine
record is this machine's, read for real. The server record from a real llama.cpp server is
tested end to end (tests/pipeline/test_e2e_llamacpp.py).
"""

from __future__ import annotations

import json
import os
import platform
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentperf.inventory import Inventory, check_inventory, runtime_from_inspect
from runner.launchers.base import Endpoint
from runner.launchers.devices import DevicePool
from runner.worker import host_inventory as collect

FIXTURE = Path(__file__).parent / "fixtures" / "nvidia-smi-q-x.xml"


class NVMLError(Exception):
    pass


class FakeNvml:
    """A stand-in for ``pynvml`` (no NVIDIA driver here): four H200s, minors 0-3, GPU 2 at a
    900 W cap with its SM application clock set to 1950 MHz; NVLink on every board."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, *, broken: bool = False) -> None:
        self.broken = broken
        self.shut = False

    def nvmlInit(self):
        if self.broken:
            raise NVMLError("Driver Not Loaded")

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        return 4

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H200"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h:08d}"

    def nvmlDeviceGetSerial(self, h):
        return f"16501240{h:05d}"

    def nvmlDeviceGetMinorNumber(self, h):
        return h

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=f"00000000:{h + 0x19:02X}:00.0".encode())

    def nvmlDeviceGetVbiosVersion(self, h):
        return "96.00.A5.00.01"

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=143771 * 2**20, used=2**20)

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 900_000 if h == 2 else 700_000

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return 700_000

    def nvmlDeviceGetEccMode(self, h):
        return (1, 1)

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1950 if kind == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetApplicationsClock(self, h, kind):
        return (1950 if h == 2 else 1785) if kind == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetDefaultApplicationsClock(self, h, kind):
        return 1785 if kind == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980 if kind == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= 18:
            raise NVMLError("Invalid Argument")
        return 1

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 10  # NVML_TOPOLOGY_MULTIPLE

    def nvmlSystemGetDriverVersion(self):
        return "570.124.06"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12080


def _grant(minors):
    pool = DevicePool.from_env({"RUNNER_DEVICES": ",".join(f"/dev/nvidia{m}" for m in range(4))})
    grant = pool.grant([len(minors)])
    # the grant hands out in declared order; pick the minors the test names
    chosen = tuple(a for a in pool.accelerators if a.minor in minors)
    return type(grant)(
        workers=(chosen,),
        shared=grant.shared,
        shm_bytes=grant.shm_bytes,
        memlock_bytes=grant.memlock_bytes,
    )


def test_nvml_lists_only_the_granted_gpus_with_every_field():
    nvml = FakeNvml()
    doc, notes = collect.accelerator_inventory(_grant({1, 2}), nvml=nvml)
    inv = Inventory.model_validate(doc)
    assert notes == [] and nvml.shut
    assert (inv.tool, inv.driver_version, inv.cuda_version) == ("nvml", "570.124.06", "12.8")
    assert [(a.index, a.minor_number, a.uuid) for a in inv.accelerators] == [
        (1, 1, "GPU-00000001"),
        (2, 2, "GPU-00000002"),
    ]
    gpu = inv.accelerators[1]
    assert (gpu.name, gpu.serial, gpu.pci_bus_id, gpu.vbios) == (
        "NVIDIA H200",
        "1650124000002",
        "00000000:1B:00.0",
        "96.00.A5.00.01",
    )
    assert (gpu.power_limit_w, gpu.power_default_limit_w, gpu.ecc_enabled) == (900.0, 700.0, True)
    assert gpu.memory_total_mib == 143771
    assert (gpu.clocks.sm_application_mhz, gpu.clocks.sm_default_application_mhz) == (1950, 1785)
    assert inv.topology == {
        "source": "nvml",
        "nvlinks_up": {"1": 18, "2": 18},
        "common_ancestor": {"1-2": 10},
    }
    # no grant (an attached endpoint): every GPU the host lists
    assert len(collect.accelerator_inventory(None, nvml=FakeNvml())[0]["accelerators"]) == 4
    # a launched server given nothing has nothing, whatever the host holds
    assert collect.accelerator_inventory(DevicePool().grant([1]), nvml=FakeNvml())[0] == {
        "tool": "none",
        "accelerators": [],
    }


def test_the_nvml_inventory_is_checked_against_the_config():
    doc, _ = collect.accelerator_inventory(_grant({1, 2}), nvml=FakeNvml())
    config = {"engine": {"name": "vllm", "version": "0.14.0"}, "clocks": {"power_cap_w": 700}}
    got = check_inventory(doc, config, accelerator="H200", accelerators_used=2)
    # GPU 2 runs at 900 W: the cap the config declares is not what the board enforces
    assert got["status"] == "fail"
    assert (
        "power cap declared 700 W; the accelerators' limits are [700.0, 900.0] W"
        in (got["summary"])
    )
    assert got["evidence"]["uuids"] == ["GPU-00000001", "GPU-00000002"]
    # an SM lock of 1950 MHz: GPU 2's application clock was set there, GPU 1's is the default
    locked = dict(config, clocks={"gpu_clock_mhz": 1950})
    got = check_inventory(doc, locked, accelerator="H200", accelerators_used=2)
    assert got["status"] == "warn" and got["evidence"]["compared"]["gpu_clock_mhz"] == {
        "declared": 1950,
        "inventory": [None, 1950],
    }
    only2, _ = collect.accelerator_inventory(_grant({2}), nvml=FakeNvml())
    got = check_inventory(only2, locked, accelerator="H200", accelerators_used=1)
    assert "sm clock" not in " ".join(got["evidence"]["not_reported"])
    assert got["evidence"]["compared"]["gpu_clock_mhz"]["inventory"] == [1950]


@pytest.fixture
def fake_smi(tmp_path):
    """A real executable standing in for nvidia-smi: prints the fixture for `-q -x`."""
    tool = tmp_path / "nvidia-smi"
    tool.write_text(f'#!/bin/sh\n[ "$1 $2" = "-q -x" ] || exit 9\ncat {FIXTURE}\n')
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return str(tool)


def test_nvidia_smi_xml_is_the_fallback_when_nvml_cannot_start(fake_smi):
    doc, notes = collect.accelerator_inventory(
        _grant({1}), nvml=FakeNvml(broken=True), smi=fake_smi
    )
    assert notes == ["NVML: Driver Not Loaded"]
    inv = Inventory.model_validate(doc)
    assert (inv.tool, inv.driver_version, inv.cuda_version) == (
        "nvidia-smi -q -x",
        "570.124.06",
        "12.8",
    )
    [gpu] = inv.accelerators
    assert (gpu.uuid, gpu.minor_number, gpu.pci_bus_id) == (
        "GPU-6a1c5e8e-0000-4000-8000-000000000002",
        1,
        "00000000:3B:00.0",
    )
    assert (gpu.power_limit_w, gpu.power_default_limit_w, gpu.ecc_enabled) == (600.0, 700.0, False)
    assert gpu.clocks.sm_application_mhz == 1590 and gpu.clocks.memory_max_mhz is None
    both = collect.parse_nvidia_smi_xml(FIXTURE.read_text())
    first = both["accelerators"][0]
    assert (first["serial"], first["vbios"], first["memory_total_mib"]) == (
        "1650124000001",
        "96.00.A5.00.01",
        143771.0,
    )
    assert first["clocks"]["sm_current_mhz"] == 345 and first["clocks"]["sm_max_mhz"] == 1980
    # neither tool: "none", with the reasons
    doc, notes = collect.accelerator_inventory(
        _grant({1}), nvml=FakeNvml(broken=True), smi="/nonexistent/nvidia-smi"
    )
    assert doc["accelerators"] == [] and notes[0] == "NVML: Driver Not Loaded"
    assert "nvidia-smi -q -x" in notes[1]


def test_amd_smi_static_json():
    text = json.dumps(
        {
            "gpu_data": [
                {
                    "gpu": 0,
                    "asic": {"market_name": "AMD Instinct MI300X"},
                    "bus": {"bdf": "0000:0c:00.0"},
                    "vbios": {"version": "113-M3000100-102"},
                    "board": {"product_serial": "692251001234"},
                    "driver": {"name": "amdgpu", "version": "6.10.5"},
                }
            ]
        }
    )
    doc = Inventory.model_validate(collect.parse_amd_smi_static(text))
    assert doc.driver_version == "6.10.5"
    assert [(a.name, a.pci_bus_id, a.serial) for a in doc.accelerators] == [
        ("AMD Instinct MI300X", "0000:0c:00.0", "692251001234")
    ]


def test_runtime_from_podman_inspect_and_the_server_record():
    inspect = [
        {
            "ImageName": "registry.local:5000/llamacpp@sha256:" + "ab" * 32,
            "ImageDigest": "sha256:" + "ab" * 32,
            "Config": {"Entrypoint": ["/usr/bin/python"], "Cmd": ["-m", "server"], "User": "1000"},
        }
    ]
    runtime = runtime_from_inspect(inspect)
    record = collect.runtime_record({"launcher": "container", "runtime": runtime})
    assert record == {
        "launcher": "container",
        "image_reference": "registry.local:5000/llamacpp@sha256:" + "ab" * 32,
        "image_digest": "sha256:" + "ab" * 32,
        "entrypoint": ["/usr/bin/python", "-m", "server"],
        "user": "1000",
    }
    assert collect.runtime_record({"launcher": "process", "command": ["python"]})["entrypoint"] == [
        "python"
    ]
    # the container launcher gives the args as written; a secret value left anywhere is redacted
    inspect[0]["Config"]["Cmd"] = ["--api-key", "s3cret-value-123"]
    inspect[0]["Config"]["Entrypoint"] = ["/bin/serve", "--token=s3cret-value-123"]
    command = ["/bin/serve", "--api-key", "<secret API_KEY>"]
    shown = runtime_from_inspect(inspect, command=command, secrets=["s3cret-value-123"])
    assert shown["entrypoint"] == command
    inspect[0]["ImageName"] += "?s3cret-value-123"  # any value left anywhere: redacted
    shown = runtime_from_inspect(inspect, command=command, secrets=["s3cret-value-123"])
    assert shown["image_reference"].endswith("?[redacted]")
    assert "s3cret-value-123" not in json.dumps(shown)

    def vllm(path):
        return {
            "/v1/models": {"data": [{"id": "m", "owned_by": "vllm"}]},
            "/version": {"version": "0.14.0"},
        }[path]

    assert collect.server_record(vllm) == {
        "engine_name": "vllm",
        "engine_version": "0.14.0",
        "source": "/v1/models owned_by; /version",
        "models": ["m"],
        "settings": None,  # vLLM's cache settings: none in these answers
    }

    def metrics_only(path):
        if path == "/metrics":
            return 'sglang_build_info{version="0.5.4",commit="abc"} 1\n'
        raise OSError("404")

    assert collect.server_record(metrics_only)["engine_version"] == "0.5.4"
    assert collect.server_record(metrics_only)["engine_name"] == "sglang"


def test_a_cpu_host_inventory_is_this_machine_and_passes_a_cpu_system(tmp_path):
    """For real: this machine's CPU, memory and kernel; a server given no accelerators."""
    machine = collect.machine_record()
    assert machine["kernel"] == f"{platform.system()} {platform.release()}"
    assert machine["cpu_count"] == os.cpu_count()
    assert machine["memory_total_mib"] > 100 and machine["cpu_model"]
    endpoint = Endpoint(served_model_name="x", base_url="http://127.0.0.1:9/v1")  # refused
    endpoint.info = {"launcher": "process", "command": ["python"]}
    doc = collect.collect_inventory(endpoint, DevicePool().grant([1]))
    assert doc["accelerators"] == [] and doc["tool"] == "none"
    assert doc["server"] == {
        "engine_name": None,
        "engine_version": None,
        "source": None,
        "models": [],
        "settings": None,
    }
    got = check_inventory(doc, {"engine": {}}, accelerator="CPU", accelerators_used=1)
    assert got["evidence"]["compared"]["accelerators_used"] == {"declared": 1, "inventory": 1}
    assert got["evidence"]["compared"]["accelerator"]["inventory"] == [
        f"CPU: {machine['cpu_model']}"
    ]
    assert got["status"] == "warn"  # the server said nothing about itself
    # GPUs where the system is a CPU: a mismatch
    gpus, _ = collect.accelerator_inventory(_grant({0}), nvml=FakeNvml())
    gpus["machine"] = machine
    got = check_inventory(gpus, {}, accelerator="CPU", accelerators_used=1)
    assert got["status"] == "fail" and "the hardware system is a CPU" in got["summary"]


@pytest.mark.llamacpp
def test_a_real_llama_cpp_server_in_the_sandbox_gives_a_real_cpu_inventory(tmp_path, monkeypatch):
    """The process launcher's sandboxed llama.cpp server (xllamacpp, the tiny GGUF) on this
    CPU host: the machine, the runtime and what the server says it is, all read for real."""
    from runner.launchers.process import ProcessLauncher
    from runner.launchers.tiny_gguf import tiny_gguf
    from tests.support.llamacpp import free_port

    monkeypatch.setenv("AGENTPERF_TINY_GGUF", str(tiny_gguf(seed=0)))
    monkeypatch.setenv("RUNNER_LAUNCH_VARS", "AGENTPERF_TINY_GGUF")
    monkeypatch.delenv("RUNNER_DEVICES", raising=False)
    grant = DevicePool.from_env().grant([1])  # a CPU pool host declares no accelerators
    launcher = ProcessLauncher(
        {
            "command": ["python", "-m", "runner.launchers.llamacpp_server", "--model",
                        "${AGENTPERF_TINY_GGUF}", "--port", "${PORT}", "--alias", "tiny"],
            "env": {},
            "port": free_port(),
            "ready_timeout_s": 300,
            "served_model_name": "tiny",
        },
        log_dir=str(tmp_path / "run"),
        devices=grant,
    )  # fmt: skip
    try:
        endpoint = launcher.start()
        doc = collect.collect_inventory(endpoint, grant)
    finally:
        launcher.stop()
    assert doc["machine"] == collect.machine_record()
    assert doc["accelerators"] == [] and doc["granted"] == []
    assert doc["runtime"] == {
        "launcher": "process",
        "image_reference": None,
        "image_digest": None,
        "entrypoint": ["python"],
        "user": "65534:65534",
    }
    server = doc["server"]
    assert server["engine_name"] == "llama.cpp" and server["models"] == ["tiny"]
    # xllamacpp's build reports build_info "b0-unknown": recorded as the source, no version
    assert server["source"].startswith("/v1/models owned_by; /props build_info=")
    config = {"engine": {"name": "llamacpp", "version": "xllamacpp 2026.10.11549"}}
    got = check_inventory(doc, config, accelerator="CPU", accelerators_used=1)
    assert got["status"] == "warn" and got["evidence"]["mismatches"] == []
    assert got["evidence"]["not_reported"] == ["the server reported no engine version"]
    assert got["evidence"]["compared"]["engine"]["server"] == {"name": "llama.cpp", "version": None}


def test_the_power_sampler_reads_only_the_granted_gpus():
    """The worker sets the grant's minors on its sampler (RunDirector._grant_devices), so
    a run's power and energy are its own GPUs', not its neighbours' on a shared host."""
    from runner.telemetry import TelemetrySampler
    from runner.telemetry.sources import NvmlSource, SourceError

    sampler = TelemetrySampler(interval_s=60.0, nvml=FakeNvml())
    sampler.minors = _grant({1, 3}).minors()
    sampler.start()
    sampler.stop()
    assert [(a["index"], a["uuid"]) for a in sampler.inventory()["accelerators"]] == [
        (1, "GPU-00000001"),
        (3, "GPU-00000003"),
    ]
    with pytest.raises(SourceError, match=r"no accelerators of the granted minors \[7\]"):
        NvmlSource.open(FakeNvml(), minors={7})


def test_http_get_reads_at_most_its_cap_from_a_server():
    """The served process is the vendor's: a body over the cap is refused, not read whole."""
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from runner.launchers.base import LauncherError, http_get

    class Big(BaseHTTPRequestHandler):
        def do_GET(self):
            size = int(self.path.strip("/"))
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            self.wfile.write(b"x" * size)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Big)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"

    def connect(host, port, timeout):
        return socket.create_connection((host, port), timeout=timeout)

    try:
        for via in (None, connect):
            assert (
                http_get(f"{base}/1000", timeout_s=10, connect=via, max_bytes=1000) == b"x" * 1000
            )
            with pytest.raises(LauncherError, match="larger than 1000 bytes"):
                http_get(f"{base}/1001", timeout_s=10, connect=via, max_bytes=1000)
            with pytest.raises(LauncherError, match=f"larger than {1 << 20} bytes"):
                http_get(f"{base}/{(1 << 20) + 4096}", timeout_s=10, connect=via)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
