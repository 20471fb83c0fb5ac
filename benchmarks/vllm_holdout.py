"""The vLLM twin against the real vLLM server it models: fitted on one configuration,
checked on configurations it was never fitted to (docs/simulator.md "Hold-out").

    .venv/bin/python -m benchmarks.vllm_holdout [--fit-config p4/t2]
        [--holdout p2/t2,p8/t2,p4/t1] [--concurrency 1,2,4] [--warmup 5] [--duration 30]
        [--fit] [--out benchmarks/results/vllm_holdout.json] [--record]
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

``--fit`` first fits the profile's three free parameters (compute efficiency, time per step,
time per running sequence) to the fit configuration's measured points (benchmarks/
twin_holdout.py ``coordinate_fit``); a hold-out configuration is never used by the fit.
``--record`` (or ``--record-from``) keeps the held-out rows as the twin's accuracy record,
``local-cpu-vllm.holdout.json`` beside the profile (``manage.py twin_accuracy`` reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agentperf.engine.jobs import Target, trial_job
from agentperf.engine.trajectory import Trajectory
from agentperf.simulator.profile import PROFILES_DIR, Profile, profile_from_dict
from benchmarks.cpu_micro import REPO
from benchmarks.twin_holdout import (
    _loss,
    _point,
    coordinate_fit,
    predict,
    print_table,
    trajectories,
    trial_config,
    write_record,
)

PROFILE = PROFILES_DIR / "local-cpu-vllm.yaml"
MICRO = REPO / "benchmarks" / "results" / "cpu_micro.json"
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


def measure(
    cfg: Config, ns: list[int], trajs: list[Trajectory], warmup: float, duration: float
) -> dict[int, dict[str, float]]:
    out = {}
    with server(cfg) as target:
        for n in ns:
            r = trial_job(
                target=target,
                trajectories=trajs,
                config=trial_config(n, warmup, duration, model=SERVED),
            )
            out[n] = _point(r)
            print(f"  measured {cfg} N={n}: {out[n]}", file=sys.stderr, flush=True)
    return out


def fit(
    cfg: Config,
    meas: dict[int, dict[str, float]],
    micro: dict[str, Any],
    trajs: list[Trajectory],
    warmup: float,
    duration: float,
) -> tuple[dict[str, float], float]:
    base = yaml.safe_load(PROFILE.read_text())["deployment"]

    def loss(v: dict[str, float]) -> float:
        prof = _profile(cfg, micro, v)
        pred = {
            n: predict(prof, trajs, trial_config(n, warmup, duration, model=SERVED)) for n in meas
        }
        return _loss(pred, meas)

    return coordinate_fit(base, FREE, meas, loss)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit-config", default="p4/t2")
    ap.add_argument("--holdout", default="p2/t2,p8/t2,p4/t1")
    ap.add_argument("--concurrency", default="1,2,4")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--fit", action="store_true", help="fit the free parameters first")
    ap.add_argument("--micro", default=str(MICRO))
    ap.add_argument("--out", default=None, help="write the table as JSON here")
    ap.add_argument("--record", action="store_true", help="write the twin's accuracy record")
    ap.add_argument("--record-from", default=None, help="the accuracy record of an --out file")
    return ap


def main() -> None:
    args = _parser().parse_args()
    if args.record_from:
        doc = json.loads(Path(args.record_from).read_text())
        write_record(doc, profile=PROFILE.stem, server="vLLM")
        return
    micro = json.loads(Path(args.micro).read_text())
    ns = [int(x) for x in args.concurrency.split(",")]
    trajs = trajectories()
    plan = [(Config.parse(args.fit_config), "fit")] + [
        (Config.parse(c), "held out") for c in args.holdout.split(",") if c
    ]
    rows: list[dict[str, Any]] = []
    fitted: dict[str, float] | None = None
    started = time.monotonic()
    for cfg, role in plan:
        meas = measure(cfg, ns, trajs, args.warmup, args.duration)
        if role == "fit" and args.fit:
            fitted, loss = fit(cfg, meas, micro, trajs, args.warmup, args.duration)
            print(f"fitted on {cfg}: {fitted} (sum of squared log errors {loss:.4f})", flush=True)
        prof = _profile(cfg, micro, fitted)
        for n in ns:
            config = trial_config(n, args.warmup, args.duration, model=SERVED)
            rows.append(
                {
                    "config": str(cfg),
                    "role": role,
                    "N": n,
                    "measured": meas[n],
                    "predicted": predict(prof, trajs, config),
                }
            )
    print_table(rows)
    print(f"({time.monotonic() - started:.0f} s)")
    doc = {
        "command": "python -m benchmarks.vllm_holdout " + " ".join(sys.argv[1:]),
        "fitted": fitted,
        "rows": rows,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    if args.record:
        write_record(doc, profile=PROFILE.stem, server="vLLM")


if __name__ == "__main__":
    main()
