"""The vLLM twin against the real vLLM server it models: fitted on one configuration,
checked on configurations it was never fitted to (docs/simulator.md "Hold-out").

    .venv/bin/python -m benchmarks.vllm_holdout [--fit-config p4/t1]
        [--holdout p1/t1,p2/t1,p8/t1] [--concurrency 1,2,4] [--warmup 5] [--duration 30]
        [--pin] [--starts 3] [--fit] [--out benchmarks/results/vllm_holdout.json] [--record]
    .venv/bin/python -m benchmarks.vllm_holdout --record-from benchmarks/results/vllm_holdout.json

A configuration is ``pSEQS/tTHREADS``: vLLM 0.32 on this CPU (`make vllm`) serving the tiny
random-weight Llama of runner/launchers/tiny_hf.py as docs/examples/vllm-process.yaml
launches it (float32, eager, prefix caching, in its bubblewrap sandbox), with
``--max-num-seqs SEQS`` and ``OMP_NUM_THREADS=THREADS``. For each configuration and
concurrency N, one trial of the engine (the same trajectories, warm-up, window and settings
as benchmarks/twin_holdout.py) runs twice:

- measured: against the real vLLM server on this host;
- predicted: on virtual time against the twin, the profile ``local-cpu-vllm`` with the
  configuration's ``max_batch = SEQS`` and the f32 figures of benchmarks/results/cpu_micro.json
  at THREADS threads; its fitted values are the profile's.

``--pin`` runs the server on its own core(s) and the load generator on another, and
``--starts K`` measures each configuration over K server starts (the median of each figure):
on this 2-core host a two-thread server shares a core with the load generator and measures
their contention, and the speed of the tiny model's short answers moves between starts
(docs/simulator.md "Hold-out: the vLLM twin"), so the configurations are single-threaded.

``--fit`` first fits the profile's three free parameters (compute efficiency, time per step,
time per running sequence) to the fit configuration's measured points; a hold-out
configuration is never used by the fit. The driver (measure, fit, predict, record) is
benchmarks/twin_holdout.py's ``run``, shared with the llama.cpp twin.
``--record`` (or ``--record-from``) keeps the held-out rows as the twin's accuracy record,
``local-cpu-vllm.holdout.json`` beside the profile (``manage.py twin_accuracy`` reads it).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import yaml

from agentperf.engine.jobs import Target
from agentperf.simulator.profile import PROFILES_DIR, Profile, profile_from_dict
from benchmarks.cpu_micro import REPO
from benchmarks.twin_holdout import MICRO, Twin, run

PROFILE = PROFILES_DIR / "local-cpu-vllm.yaml"
EXAMPLE = REPO / "docs" / "examples" / "vllm-process.yaml"
SERVED = "tiny-vllm-test"
FREE = (
    # (deployment path, low, high): the parameters the fit moves
    ("efficiency.compute", 0.01, 1.5),
    ("efficiency.iteration_overhead_us", 0.0, 200000.0),
    ("scheduler.per_sequence_us", 0.0, 100000.0),
)


@dataclass(frozen=True, slots=True)
class Config:
    seqs: int
    threads: int

    @classmethod
    def parse(cls, text: str) -> Config:
        try:
            p, t = text.split("/")
            if not (p.startswith("p") and t.startswith("t")):
                raise ValueError
            return cls(int(p[1:]), int(t[1:]))
        except ValueError:
            raise SystemExit(f"config {text!r}: pSEQS/tTHREADS, e.g. p4/t2") from None

    def __str__(self) -> str:
        return f"p{self.seqs}/t{self.threads}"


def profile_doc(cfg: Config, micro: dict[str, Any], free: dict[str, float] | None = None) -> Any:
    """The twin of ``cfg``: the profile with the configuration's batch and f32 figures."""
    doc = yaml.safe_load(PROFILE.read_text())
    row = next(
        (r for r in micro["measurements"] if r["type"] == "f32" and r["threads"] == cfg.threads),
        None,
    )
    if row is None:
        raise SystemExit(f"{MICRO}: no f32 measurement at {cfg.threads} threads")
    src = f"benchmarks/cpu_micro.py: f32 at {cfg.threads} threads"
    doc["system"]["peak_tflops_dense"] = {
        "f32": {"value": row["matmul_gflops_per_thread"] * cfg.threads / 1e3, "source": src}
    }
    doc["system"]["hbm_bandwidth_tb_s"] = {"value": row["bandwidth_gb_s"] / 1e3, "source": src}
    dep = doc["deployment"]
    dep["aggregated"]["max_batch"] = cfg.seqs
    for path, value in (free or {}).items():
        section, key = path.split(".")
        dep[section][key] = value
    return doc


def _profile(cfg: Config, micro: dict[str, Any], free: dict[str, float] | None = None) -> Profile:
    return profile_from_dict(profile_doc(cfg, micro, free), path=PROFILE)


@contextmanager
def server(cfg: Config) -> Iterator[Target]:
    """vLLM as the example launches it, with ``cfg``'s sequences and threads: where to send
    (its base URL, through the sandbox's loopback)."""
    from runner.launchers import vllm_env
    from runner.launchers.base import free_port
    from runner.launchers.process import ProcessLauncher

    config = yaml.safe_load(EXAMPLE.read_text())
    os.environ.update(
        AGENTPERF_VLLM=str(vllm_env.ensure_venv().parent.parent),
        AGENTPERF_TINY_HF=str(vllm_env.tiny_model(seed=0)),
        RUNNER_LAUNCH_VARS="AGENTPERF_VLLM,AGENTPERF_TINY_HF",
    )
    args = list(config["launch"]["args"])
    args[args.index("--max-num-seqs") + 1] = str(cfg.seqs)
    launcher = ProcessLauncher(
        {
            "command": [config["launch"]["command"], *args],
            "port": free_port(),
            "served_model_name": SERVED,
            "env": {**config["env"], "OMP_NUM_THREADS": str(cfg.threads)},
            "ready_timeout_s": 600,
        },
        log_dir=tempfile.mkdtemp(prefix="vllm-holdout-"),
    )
    try:
        endpoint = launcher.start()
        yield Target(base_url=endpoint.base_url, connect=endpoint.connect)
    finally:
        launcher.stop()


VLLM = Twin(
    module="benchmarks.vllm_holdout",
    server="vLLM",
    profile=PROFILE,
    free=FREE,
    model=SERVED,
    parse=Config.parse,
    serve=server,
    build=_profile,
    fit_config="p4/t1",
    holdout="p1/t1,p2/t1,p8/t1",
    warmup=5.0,
    duration=30.0,
)


if __name__ == "__main__":
    run(VLLM)
