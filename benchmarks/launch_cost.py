"""What the container launcher costs against the bubblewrap sandbox, for the same llama.cpp
server (the tiny GGUF, `python -m runner.launchers.llamacpp_server`), side by side:

    .venv/bin/python -m benchmarks.launch_cost [--repeat 3]

- container (runner/launchers/container.py): pull `engine.image` by digest from a loopback
  registry (the first start on an empty Podman storage: a cold pull of the whole image; the
  later ones find its layers and only check the manifest), start it with Podman, wait for
  `/v1/models` inside its network namespace; then stop and remove it;
- sandbox (runner/launchers/process.py): start the same command on the host in bubblewrap,
  wait for `/v1/models` inside its namespace; then stop it.

The image is built from local files and pushed first (demo/container_image.py; not timed).
Podman runs with runc and cgroupfs, on a storage of its own under a temporary folder; needs
root (both launchers enter the server's network namespace) and `make containers`. Figures
in docs/benchmarks.md "Launch cost".
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from demo.container_image import push_image, start_registry
from runner.launchers.base import free_port
from runner.launchers.container import ContainerLauncher, podman_global_argv
from runner.launchers.process import ProcessLauncher
from runner.launchers.tiny_gguf import tiny_gguf

ARGS = ["-m", "runner.launchers.llamacpp_server", "--model", "${AGENTPERF_TINY_GGUF}"]
ARGS += ["--port", "${PORT}", "--alias", "tiny", "--threads", "1"]


def _launch(kind: str, port: int, image: str | None = None) -> dict[str, Any]:
    section: dict[str, Any] = {
        "kind": kind,
        "command": ["python", *ARGS],
        "env": {"OMP_NUM_THREADS": "1"},
        "port": port,
        "ready_timeout_s": 300,
        "served_model_name": "tiny",
    }
    if image:
        section["image"] = image
    return section


def _one(launcher: Any) -> dict[str, float]:
    started = time.monotonic()
    endpoint = launcher.start()
    ready = time.monotonic() - started
    stop_started = time.monotonic()
    launcher.stop()
    out = {"ready_s": ready, "stop_s": time.monotonic() - stop_started}
    if "pull_s" in endpoint.info:
        out["pull_s"] = float(endpoint.info["pull_s"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.launch_cost")
    ap.add_argument("--repeat", type=int, default=3, help="starts of each (default 3)")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="agentperf-launch-cost-"))
    os.environ["RUNNER_PODMAN_ROOT"] = str(work / "podman-root")
    os.environ["RUNNER_PODMAN_RUNROOT"] = str(work / "podman-runroot")
    model = tiny_gguf(seed=0)
    os.environ["AGENTPERF_TINY_GGUF"] = str(model)
    os.environ["RUNNER_LAUNCH_VARS"] = "AGENTPERF_TINY_GGUF"
    os.environ["RUNNER_SANDBOX_RO_PATHS"] = str(model.parent)
    registry = start_registry(work / "registry", free_port())
    os.environ["RUNNER_REGISTRIES"] = f"http://{registry.host}"
    try:
        # the image goes in through a separate storage, so the runner's storage starts empty
        builder = [*podman_global_argv()]
        builder[builder.index("--root") + 1] = str(work / "build-root")
        builder[builder.index("--runroot") + 1] = str(work / "build-runroot")
        image = push_image(builder, registry.host)
        print(f"image: {image}", flush=True)
        rows: list[tuple[str, dict[str, float]]] = []
        for i in range(args.repeat):
            container = ContainerLauncher(
                _launch("container", free_port(), image), log_dir=str(work / f"c{i}"), run_id=i
            )
            rows.append(("container (cold pull)" if i == 0 else "container", _one(container)))
            sandbox = ProcessLauncher(_launch("process", free_port()), log_dir=str(work / f"p{i}"))
            rows.append(("sandbox", _one(sandbox)))
    finally:
        registry.stop()
        for root in ("build-root", "podman-root"):
            subprocess.run(
                [*podman_global_argv(), "--root", str(work / root), "system", "reset", "--force"],
                capture_output=True,
            )
    print(f"\n{'launcher':<24}{'pull s':>9}{'pull+start to ready s':>24}{'stop s':>9}")
    for name, row in rows:
        pull = f"{row['pull_s']:.2f}" if "pull_s" in row else "-"
        print(f"{name:<24}{pull:>9}{row['ready_s']:>24.2f}{row['stop_s']:>9.2f}")
    for name in ("container", "sandbox"):
        warm = [r["ready_s"] for n, r in rows if n == name]
        if warm:
            print(f"median {name} (warm) to ready: {statistics.median(warm):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
