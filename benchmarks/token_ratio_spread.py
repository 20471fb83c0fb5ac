"""How much an honest server's output-token ratio moves from trial to trial by chance: the
sampling spread behind the ``token_counts`` check (docs/verification.md "token_counts").

    .venv/bin/python -m benchmarks.token_ratio_spread [--concurrency 1,2,4] [--repeats 3]
        [--warmup 3] [--duration 20] [--out benchmarks/results/token_ratio_spread.json]

The check holds each trial's Σ server ``completion_tokens`` ÷ Σ local (cl100k) count of the
streamed text to its baseline. This runs the trials `make demo` and the llama.cpp end to end
run — the tiny random-weight GGUF served by ``runner.launchers.llamacpp_server`` with the
process example's settings (4 slots of 8,192 tokens, 2 threads), the small private set's
shape, the ``local-cpu`` pool's warm-up and window — ``--repeats`` times at each
concurrency, and prints per trial: the requests, the ratio, its standard error (the ratio
estimator's linearisation, as the check computes it) and its deviation from the first
lowest-concurrency trial; then the per-request ratios' spread and how far the trials'
ratios spread against what their standard errors predict.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from agentperf.engine.jobs import Target, trial_job
from agentperf.verification.checks import ratio_estimate
from benchmarks.cpu_micro import ALIAS, REPO, Server
from benchmarks.twin_holdout import trial_config


def _dataset() -> Any:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from agentperf.engine.datasets.synthetic import generate_dataset
    from catalog.datasets import small_shape

    return generate_dataset(
        seed=11, trajectories=40, params=small_shape(), name="token-spread", version="1"
    ).trajectories


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", default="1,2,4")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    from runner.launchers.tiny_gguf import tiny_gguf

    trajectories = _dataset()
    rows: list[dict[str, Any]] = []
    per_request: list[float] = []
    with Server(tiny_gguf(seed=0), parallel=4, threads=2, ctx_per_slot=8192) as server:
        for repeat in range(args.repeats):
            for n in (int(x) for x in args.concurrency.split(",")):
                result = trial_job(
                    target=Target(base_url=server.url + "/v1"),
                    trajectories=trajectories,
                    config=trial_config(n, args.warmup, args.duration, model=ALIAS, seed=repeat),
                )
                w0, w1 = result.summary.window_start_ns, result.summary.window_end_ns
                pairs = [
                    (float(r.n_out), float(r.local_output_tokens))
                    for r in result.records
                    if r.ok and w0 <= r.t_send_ns < w1 and r.n_out and r.local_output_tokens
                ]
                per_request += [a / b for a, b in pairs]
                estimate = ratio_estimate(pairs)
                row = {"repeat": repeat, "concurrency": n, "requests": len(pairs)}
                if estimate is not None:
                    row |= {"ratio": estimate.ratio, "se": estimate.se}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    base = next(r for r in rows if "ratio" in r)
    print(f"{'rep':>3} {'N':>3} {'req':>4} {'ratio':>6} {'se':>6} {'dev':>7} {'dev/sd':>7}")
    z_scores = []
    for r in rows:
        if "ratio" not in r:
            print(f"{r['repeat']:>3} {r['concurrency']:>3} {r['requests']:>4}  (no ratio)")
            continue
        dev = r["ratio"] / base["ratio"] - 1
        sd = (
            (r["se"] / base["ratio"]) ** 2 + (r["ratio"] * base["se"] / base["ratio"] ** 2) ** 2
        ) ** 0.5
        z = dev / sd if sd > 0 and r is not base else float("nan")
        if r is not base and sd > 0:
            z_scores.append(z)
        print(
            f"{r['repeat']:>3} {r['concurrency']:>3} {r['requests']:>4} {r['ratio']:6.3f} "
            f"{r['se']:6.3f} {dev:+7.1%} {z:+7.2f}"
        )
    summary = {
        "requests": len(per_request),
        "per_request_ratio_mean": statistics.fmean(per_request),
        "per_request_ratio_sd": statistics.stdev(per_request) if len(per_request) > 1 else None,
        "max_abs_deviation": max(abs(r["ratio"] / base["ratio"] - 1) for r in rows if "ratio" in r),
        "max_abs_z": max((abs(z) for z in z_scores), default=None),
    }
    print(json.dumps(summary, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps({"trials": rows, "summary": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
