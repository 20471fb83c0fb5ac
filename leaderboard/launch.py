"""How a result's deployment was started, as its run reported it (docs/security.md
"Container launcher"): whether the config's image is what served.

- `container`: `engine.image` pulled by digest and run with Podman: the image ran;
- `process`: `launch` run on the pool host in the bubblewrap sandbox: "host process, image
  not run";
- `attached`: an endpoint the vendor operates; the platform started nothing;
- `simulated`, `slurm`: the platform's simulator; a Slurm job (each task in the pool's
  container runtime, docs/pipeline.md "Slurm").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leaderboard.models import Result

HOST_PROCESS = "host process, image not run"
SLURM_IMAGE_RUNTIMES = {"podman", "pyxis"}  # runner/launchers/slurm.py runtimes

NOTES = {
    "container": "image pulled by digest and run (Podman)",
    "process": HOST_PROCESS,
    "attached": "an endpoint the vendor operates; the platform did not start it",
    "simulated": "the platform's simulator; no image",
    "slurm": "a Slurm job on the pool's cluster",
}


def result_launch(result: Result) -> dict[str, Any] | None:
    """{launcher, image_run, image, note} from the run's endpoint report (``run.runner``);
    None when the run reported no launcher."""
    runner = result.run.runner if result.run is not None else None
    endpoint = runner.endpoint if runner is not None else None
    if endpoint is None:
        return None
    launcher = endpoint.launcher
    slurm = endpoint.slurm
    runtime = slurm.runtime if launcher == "slurm" and slurm is not None else None
    # a Slurm task runs the image through the pool's container runtime; `host` runs none
    image_run = launcher == "container" or runtime in SLURM_IMAGE_RUNTIMES
    note = NOTES.get(launcher, launcher)
    if launcher == "slurm":
        note += f", each task in the image ({runtime})" if image_run else f"; {HOST_PROCESS}"
    return {
        "launcher": launcher,
        "image_run": image_run,
        "image": endpoint.image if image_run else None,
        "note": note,
    }
