"""vLLM ground truth: the engine's own figures against vLLM's request histograms over the
same requests (docs/benchmarks.md "vLLM ground truth").

    PYTHONPATH=. .venv/bin/python benchmarks/vllm_ground_truth.py [--agents 1,2,4] [--duration 20]

Starts vLLM 0.32 (`make vllm`: the CPU build and the tiny recipe model) in its sandbox with
docs/examples/vllm-process.yaml, then for each agent count runs one engine trial of the CPU
pool's small test-set shape (prompts of 400 to ~2,500 tokens, short answers), scraping
vLLM's /metrics just before the trial's first request and after its last answer, so both
sides count exactly the same requests. It prints, side by side:

- requests: the engine's records against the delta of `vllm:e2e_request_latency_seconds_count`;
- mean TTFT: the engine's (first token's network read − send) against the delta of
  `vllm:time_to_first_token_seconds` sum / count (vLLM measures from the request's
  arrival in its engine to the first token's emission);
- mean time per output token: the engine's per request (t_last − t_first) / (n_out − 1)
  against `vllm:request_time_per_output_token_seconds` sum / count, and the output speed
  each implies;
- prefix-cache hits: the engine's sum of `usage.prompt_tokens_details.cached_tokens` against
  the delta of `vllm:prefix_cache_hits_total` (docs/metrics.md "Cache truth").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from agentperf.engine.client import HttpTransport
from agentperf.engine.datasets.synthetic import ShapeParams, generate_dataset
from agentperf.engine.replay import ReplayConfig
from agentperf.engine.transport import RealClock
from agentperf.engine.trial import TrialConfig, run_trial
from agentperf.verification.speculative import scrape_metrics
from runner.launchers import vllm_env
from runner.launchers.base import Endpoint, free_port
from runner.launchers.process import ProcessLauncher

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "docs" / "examples" / "vllm-process.yaml"
# catalog/datasets.py small_shape(): the set a CPU pool replays
SMALL = ShapeParams(
    turns_median=6,
    initial_min=400,
    initial_max=900,
    output_median=40,
    output_sigma=0.8,
    output_max=256,
    result_median=80,
    result_max=400,
    delay_median_s=0.5,
    context_tokens=2500,
)
SERIES = (
    "vllm:time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count",
    "vllm:request_time_per_output_token_seconds_sum",
    "vllm:request_time_per_output_token_seconds_count",
    "vllm:e2e_request_latency_seconds_count",
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total",
)


def counters(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r"^([a-z0-9_:]+)(\{[^}]*\})?\s+(\S+)$", line)
        if match and match.group(1) in SERIES:
            out[match.group(1)] = out.get(match.group(1), 0.0) + float(match.group(3))
    return out


def pct(a: float, b: float) -> str:
    return f"{(a - b) / b * 100:+.1f}%" if b else "—"


def _parse() -> argparse.Namespace:
    """The command line: agent counts, the trial's warm-up and window, the dataset's size."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", default="1,2,4")
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--trajectories", type=int, default=12)
    return ap.parse_args()


def _launcher() -> ProcessLauncher:
    """vLLM as docs/examples/vllm-process.yaml launches it, from `make vllm`'s build and the
    tiny recipe model, on a free port (not started)."""
    config = yaml.safe_load(EXAMPLE.read_text())
    os.environ.update(
        AGENTPERF_VLLM=str(vllm_env.ensure_venv().parent.parent),
        AGENTPERF_TINY_HF=str(vllm_env.tiny_model(seed=0)),
        RUNNER_LAUNCH_VARS="AGENTPERF_VLLM,AGENTPERF_TINY_HF",
    )
    launch = config["launch"]
    return ProcessLauncher(
        {
            "command": [launch["command"], *launch["args"]],
            "port": free_port(),
            "served_model_name": launch["served_model_name"],
            "env": config["env"],
            "ready_timeout_s": 600,
        },
        log_dir=tempfile.mkdtemp(prefix="vllm-ground-truth-"),
    )


def _trial_config(args: argparse.Namespace, n: int, model: str) -> TrialConfig:
    """One trial of ``n`` agents: no health limits to speak of, no bootstrap."""
    return TrialConfig(
        concurrency=n,
        warmup_s=args.warmup,
        duration_s=args.duration,
        accelerators=1,
        min_requests=1,
        max_loop_lag_ms=1000.0,
        max_cpu_percent=100.0,
        bootstrap_resamples=0,
        replay=ReplayConfig(
            model=model,
            seed=n,
            tool_delay_scale=0.3,
            namespace_salt=f"ground-truth-{n}",
        ),
    )


async def _measure(
    endpoint: Endpoint, trajectories: list, trial: TrialConfig
) -> tuple[dict[str, float], dict[str, float], list]:
    """vLLM's counters just before the trial's first request and after its last answer,
    and the trial's records: both sides count exactly the same requests."""
    base = str(endpoint.base_url)

    def scrape() -> dict[str, float]:
        return counters(scrape_metrics(base, connect=endpoint.connect))

    transport = HttpTransport(base, connect=endpoint.connect)
    try:
        before = await asyncio.to_thread(scrape)
        result = await run_trial(transport, RealClock(), trajectories, trial)
        after = await asyncio.to_thread(scrape)
    finally:
        await transport.aclose()
    return before, after, result.records


def _compare(
    n: int, before: dict[str, float], after: dict[str, float], records: list
) -> dict[str, Any]:
    """One agent count's engine figures beside the deltas of vLLM's own counters."""
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in SERIES}
    ok = [r for r in records if r.ok and r.t_first_ns is not None]
    ttft = sum(r.ttft_s for r in ok) / len(ok)
    tpots = [
        (r.t_last_ns - r.t_first_ns) / 1e9 / (r.n_out - 1)
        for r in ok
        if r.n_out and r.n_out > 1 and r.t_last_ns and r.t_last_ns > r.t_first_ns
    ]
    tpot = sum(tpots) / len(tpots)
    v_ttft = delta[SERIES[0]] / delta[SERIES[1]] if delta[SERIES[1]] else 0.0
    v_tpot = delta[SERIES[2]] / delta[SERIES[3]] if delta[SERIES[3]] else 0.0
    return {
        "agents": n,
        "requests": len(records),
        "vllm_requests": int(delta[SERIES[4]]),
        "ttft": ttft,
        "vllm_ttft": v_ttft,
        "tpot": tpot,
        "vllm_tpot": v_tpot,
        "cached": sum(r.n_cached or 0 for r in records),
        "vllm_hits": int(delta["vllm:prefix_cache_hits_total"]),
    }


def _print_table(rows: list[dict[str, Any]]) -> None:
    """The comparison as a Markdown table (docs/benchmarks.md "vLLM ground truth")."""
    print()
    print(
        "| agents | requests (engine / vLLM) | mean TTFT ms (engine / vLLM, diff) "
        "| mean TPOT ms (engine / vLLM, diff) | output speed tok/s (engine / vLLM) "
        "| cached tokens (engine / vLLM counter) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['agents']} | {r['requests']} / {r['vllm_requests']} "
            f"| {r['ttft'] * 1e3:.1f} / {r['vllm_ttft'] * 1e3:.1f} ({pct(r['ttft'], r['vllm_ttft'])}) "
            f"| {r['tpot'] * 1e3:.2f} / {r['vllm_tpot'] * 1e3:.2f} ({pct(r['tpot'], r['vllm_tpot'])}) "
            f"| {1 / r['tpot']:.1f} / {1 / r['vllm_tpot'] if r['vllm_tpot'] else 0:.1f} "
            f"| {r['cached']:,} / {r['vllm_hits']:,} |"
        )


def main() -> int:
    args = _parse()
    launcher = _launcher()
    dataset = generate_dataset(seed=7, trajectories=args.trajectories, params=SMALL)
    rows = []
    started = time.monotonic()
    try:
        endpoint = launcher.start()
        print(f"vLLM ready in {time.monotonic() - started:.0f} s at {endpoint.base_url}")
        for n in [int(x) for x in args.agents.split(",")]:
            trial = _trial_config(args, n, endpoint.served_model_name)
            before, after, records = asyncio.run(_measure(endpoint, dataset.trajectories, trial))
            rows.append(_compare(n, before, after, records))
    finally:
        launcher.stop()
    _print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
