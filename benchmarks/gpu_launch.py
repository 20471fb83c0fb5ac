"""A CUDA program inside the launchers' isolation sees exactly the GPU it was given.

    .venv/bin/python benchmarks/gpu_launch.py [--gpu INDEX] [--seconds 20] [--size 8192]
                                              [--image REF]

On a pool host with an NVIDIA GPU, torch and root (what a runner has): the pool grants one
GPU (default: the host's last, so that it is not also device 0 on the host) the way a run
does (runner/launchers/devices.py; `RUNNER_DEVICES` when set, else `/dev/nvidia<minor>` of
that GPU), and a torch program runs in the `process` launcher's bubblewrap sandbox
(runner/launchers/sandbox.py). Inside, it reports the CUDA devices it sees (count, names,
UUIDs) and the NVIDIA nodes in its `/dev`, then loads its one GPU with a bf16 matmul loop
for `--seconds`. Outside, NVML reads every GPU's energy counter
(`nvmlDeviceGetTotalEnergyConsumption`) before and after. With `--image` (an image holding
python and torch) and Podman on the host, the same program runs in a container with
`--device` of the same grant (DeviceGrant.podman_args).

Passes (exit 0) when inside it sees exactly one CUDA device, whose UUID is the granted
GPU's, no NVIDIA node but the granted one and the shared control nodes, and the granted
GPU's energy counter advanced while it ran. Exit 1 when any of that fails. A host with no
GPU prints "no GPU" with the reason and exits 0 (torch and NVML are imported lazily).
Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runner.launchers import devices as device_mod
from runner.launchers.base import LauncherError
from runner.launchers.devices import DevicePool
from runner.launchers.sandbox import Sandbox

# What runs inside: one JSON line of what it sees, then load on its GPU until the deadline.
PROBE = textwrap.dedent(
    """
    import json, os, sys, time
    seen = {"dev": sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))}
    try:
        import torch
    except ImportError as exc:
        print("SEEN " + json.dumps(dict(seen, error=f"no torch: {exc}")), flush=True)
        sys.exit(3)
    count = torch.cuda.device_count()
    seen["cuda_devices"] = count
    seen["names"] = [torch.cuda.get_device_name(i) for i in range(count)]
    seen["uuids"] = [str(torch.cuda.get_device_properties(i).uuid) for i in range(count)]
    print("SEEN " + json.dumps(seen), flush=True)
    if count:
        size, seconds = int(sys.argv[1]), float(sys.argv[2])
        a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        deadline, n = time.monotonic() + seconds, 0
        while time.monotonic() < deadline:
            for _ in range(20):
                torch.matmul(a, b)
            torch.cuda.synchronize()
            n += 20
        print("LOADED " + json.dumps({"matmuls": n}), flush=True)
    """
)


def no_gpu(reason: str) -> int:
    print(json.dumps({"measured": False, "reason": f"no GPU: {reason}"}))
    return 0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def energy(nvml: Any, handles: list[Any]) -> list[float | None]:
    out: list[float | None] = []
    for handle in handles:
        try:
            out.append(float(nvml.nvmlDeviceGetTotalEnergyConsumption(handle)))
        except Exception:  # NVML_ERROR_NOT_SUPPORTED before Volta
            out.append(None)
    return out


def _lines(text: str, tag: str) -> dict[str, Any] | None:
    for line in text.splitlines():
        if line.startswith(tag + " "):
            return dict(json.loads(line[len(tag) + 1 :]))
    return None


def run_sandboxed(grant: Any, args: argparse.Namespace, work: Path) -> tuple[int, str]:
    sandbox = Sandbox(
        work_dir=str(work / "sandbox"), env={}, read_only=[], serves=False, devices=grant
    )
    log_path = work / "sandbox.log"
    with open(log_path, "wb") as log:
        process = sandbox.start(["python", "-c", PROBE, str(args.size), str(args.seconds)], log=log)
        code = process.wait(timeout=args.seconds + 600)
    sandbox.stop()
    return code, log_path.read_text(errors="replace")


def run_container(grant: Any, args: argparse.Namespace) -> tuple[int, str]:
    podman = shutil.which("podman")
    assert podman is not None
    argv = [
        podman, "run", "--rm", "--network=none", "--cap-drop=all",
        "--security-opt=no-new-privileges", "--user=65534:65534", *grant.podman_args(),
        args.image, "python", "-c", PROBE, str(args.size), str(args.seconds),
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=args.seconds + 900)
    return done.returncode, done.stdout + done.stderr


def judge(
    where: str, code: int, output: str, *, uuid: str, allowed: set[str], deltas: dict[str, Any]
) -> dict[str, Any]:
    seen = _lines(output, "SEEN")
    loaded = _lines(output, "LOADED")
    report: dict[str, Any] = {"where": where, "exit": code, "seen": seen, "loaded": loaded}
    problems = []
    if seen is None:
        problems.append("the program printed nothing: " + output[-600:])
    else:
        if seen.get("cuda_devices") != 1:
            problems.append(f"it sees {seen.get('cuda_devices')} CUDA devices, not 1")
        if [u.removeprefix("GPU-") for u in seen.get("uuids") or []] != [uuid.removeprefix("GPU-")]:
            problems.append(f"it sees {seen.get('uuids')}, not the granted {uuid}")
        extra = set(seen.get("dev") or []) - allowed
        if extra:
            problems.append(f"/dev holds NVIDIA nodes it was not given: {sorted(extra)}")
    if loaded is None:
        problems.append("the load did not run")
    granted = deltas.get("granted_mj")
    if granted is None or granted <= 0:
        problems.append(f"the granted GPU's energy counter did not advance ({granted})")
    report["energy"] = deltas
    report["problems"] = problems
    report["ok"] = not problems
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", type=int, default=None, help="host index (default: the last)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--image", default=None, help="an image with python and torch")
    args = parser.parse_args(argv)
    try:
        import pynvml as nvml

        nvml.nvmlInit()
    except Exception as exc:  # no driver, no library
        return no_gpu(f"NVML unavailable: {exc}")
    try:
        count = int(nvml.nvmlDeviceGetCount())
        if count == 0:
            return no_gpu("NVML lists no GPU")
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        index = count - 1 if args.gpu is None else args.gpu
        handle = handles[index]
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
        modprobe = shutil.which("nvidia-modprobe")
        if modprobe:  # /dev/nvidia-uvm exists only once the uvm module is loaded
            subprocess.run([modprobe, "-u", "-c=0"], capture_output=True, timeout=60)
        env = dict(os.environ)
        env.setdefault("RUNNER_DEVICES", f"/dev/nvidia{minor}")
        if "RUNNER_MEMLOCK" not in env and not device_mod._may_raise_limits():
            hard = device_mod.host_memlock()
            env["RUNNER_MEMLOCK"] = "unlimited" if hard is None else str(hard)
        try:
            grant = DevicePool.from_env(env).grant([1])
        except LauncherError as exc:
            print(json.dumps({"ok": False, "problems": [str(exc)]}))
            return 1
        allowed = {inside.removeprefix("/dev/") for _, inside in grant.nodes()}
        header = {
            "gpus_on_host": count,
            "granted": {"index": index, "uuid": uuid, "minor": minor},
            "grant": grant.describe(),
            "driver": _text(nvml.nvmlSystemGetDriverVersion()),
        }
        print(json.dumps(header))
        reports = []
        runs: list[tuple[str, Any]] = [("sandbox", None)]
        if args.image and shutil.which("podman"):
            runs.append(("container", None))
        elif args.image:
            print(json.dumps({"where": "container", "skipped": "no podman on this host"}))
        for where, _ in runs:
            before = energy(nvml, handles)
            started = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="gpu-launch-") as work:
                try:
                    if where == "sandbox":
                        code, output = run_sandboxed(grant, args, Path(work))
                    else:
                        code, output = run_container(grant, args)
                except (LauncherError, OSError, subprocess.SubprocessError) as exc:
                    code, output = -1, f"{type(exc).__name__}: {exc}"
            after = energy(nvml, handles)
            deltas: dict[str, Any] = {
                "seconds": round(time.monotonic() - started, 1),
                "per_gpu_j": [
                    None if a is None or b is None else round((b - a) / 1000.0, 1)
                    for a, b in zip(before, after, strict=True)
                ],
            }
            a, b = before[index], after[index]
            deltas["granted_mj"] = None if a is None or b is None else b - a
            report = judge(where, code, output, uuid=uuid, allowed=allowed, deltas=deltas)
            print(json.dumps(report))
            reports.append(report)
        return 0 if all(r["ok"] for r in reports) else 1
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


if __name__ == "__main__":
    sys.exit(main())
