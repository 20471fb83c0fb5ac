"""NVML energy counter against integrated `nvidia-smi power.draw`, on a real GPU.

    .venv/bin/python benchmarks/gpu_telemetry.py [--seconds 60] [--interval 0.2] [--size 8192]

A fixed load (a torch bf16 matmul of `size`×`size` in a loop on GPU 0) runs for
`--seconds`; two `runner.telemetry` samplers run beside it, one reading NVML (energy
counter delta, the method results use), one reading `nvidia-smi` (power integrated by the
trapezoid rule, the fallback). Over the same window (the load's middle, a few seconds cut
at each end) the two energies should agree within 5 %. Prints one JSON line and exits 0
when they do, 1 when they do not, 2 when there is no GPU (torch is imported lazily, so
the script runs anywhere and says why it cannot measure). Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runner.telemetry import NvmlSource, SmiSource, SourceError, TelemetrySampler

AGREEMENT = 0.05


def no_gpu(reason: str) -> int:
    print(json.dumps({"measured": False, "reason": reason}))
    print(f"gpu_telemetry: cannot measure here: {reason}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--size", type=int, default=8192)
    args = parser.parse_args(argv)
    try:
        import torch  # lazy: hosts without a GPU never need it
    except ImportError:
        return no_gpu("torch is not installed (pip install torch on the GPU host)")
    if not torch.cuda.is_available():
        return no_gpu("torch sees no CUDA device")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return no_gpu("no nvidia-smi on PATH")
    try:
        nvml = NvmlSource.open()
    except SourceError as exc:
        return no_gpu(str(exc))
    counter = TelemetrySampler(interval_s=args.interval, source=nvml)
    sampled = TelemetrySampler(
        interval_s=args.interval, source=SmiSource(name="nvidia-smi", tool=smi)
    )
    a = torch.randn(args.size, args.size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(args.size, args.size, device="cuda", dtype=torch.bfloat16)
    # >= 1 GiB resident, so the accelerator counts as in use (runner/telemetry/power.py)
    ballast = torch.empty(2 * 2**30, device="cuda", dtype=torch.uint8)
    counter.start()
    sampled.start()
    started = time.perf_counter_ns()
    deadline = started + int(args.seconds * 1e9)
    matmuls = 0
    while time.perf_counter_ns() < deadline:
        for _ in range(20):
            torch.matmul(a, b)
        torch.cuda.synchronize()
        matmuls += 20
    ended = time.perf_counter_ns()
    del ballast
    time.sleep(2 * args.interval + 1.0)  # readings after the window's end
    counter.stop()
    sampled.stop()
    cut = int(min(5.0, args.seconds / 6) * 1e9)
    start_ns, end_ns = started + cut, ended - cut
    nv = counter.window(start_ns, end_ns)
    sm = sampled.window(start_ns, end_ns)
    if not nv.get("measured") or not sm.get("measured"):
        print(json.dumps({"nvml": nv, "nvidia_smi": sm}, default=str))
        return 1
    # Both over the accelerators in use; nvidia-smi's integral over the same window.
    difference = (nv["energy_j"] - sm["energy_j"]) / sm["energy_j"]
    seconds = (end_ns - start_ns) / 1e9
    flops = 2 * args.size**3 * matmuls / ((ended - started) / 1e9)
    report = {
        "gpu": nv["accelerators_used"][0]["name"],
        "window_s": round(seconds, 2),
        "matmul_tflops": round(flops / 1e12, 1),
        "nvml_method": nv["method"],
        "nvml_energy_j": round(nv["energy_j"], 1),
        "nvml_power_w": round(nv["power_w"], 1),
        "nvml_coverage": round(nv["coverage"], 4),
        "nvml_power_cross_check_pct": round(nv.get("cross_check", {}).get("difference_pct", 0), 2),
        "smi_energy_j": round(sm["energy_j"], 1),
        "smi_power_w": round(sm["power_w"], 1),
        "smi_samples": sm["samples"],
        "smi_coverage": round(sm["coverage"], 4),
        "smi_max_gap_s": round(sm["max_gap_s"], 3),
        "difference_pct": round(100 * difference, 2),
        "agree_within_5pct": abs(difference) <= AGREEMENT,
    }
    print(json.dumps(report))
    return 0 if report["agree_within_5pct"] else 1


if __name__ == "__main__":
    sys.exit(main())
