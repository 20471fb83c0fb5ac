"""Sharded load generation: events per second and TTFT error against the shard count K,
side by side with K = 1 in the same run (docs/benchmarks.md "Sharded trials").

    .venv/bin/python -m benchmarks.shard_scaling                     # K = 1, 2 (this 2-core host)
    .venv/bin/python -m benchmarks.shard_scaling --shards 1,2,4,8,12 --server-cores 12-15   # big host
    .venv/bin/python -m benchmarks.shard_scaling --memory             # 8,192 agents in one shard

The server is the loopback stub (agentperf/engine/stub.py) in its own process on its own
cores, recording when it wrote each stream's first content event (keyed by X-Request-Id);
the clients are real engine trials — the synthetic dataset's ~27k-token prompts, the
replay's pacing, shards as the platform runs them (``LocalShards``; K = 1 runs in this
process, as a one-process trial does). Per K: output events per wall second over the
window, client CPU per shard, TTFT error = client first-token stamp − the stub's write
(p50/p99, ms), and the scaling ratio events(K) / (K × events(1)).

``--memory``: 8,192 agents in one shard process (records streamed to disk, as every shard
does), slow streams so the host's two cores are not the limit; prints the shard's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from agentperf.engine.jobs import Target, trial_job
from agentperf.engine.metrics import percentile
from agentperf.engine.replay import ReplayConfig
from agentperf.engine.sharding import LocalShards, Sharding
from agentperf.engine.stub import StubConfig, serve
from agentperf.engine.trajectory import load_dataset
from agentperf.engine.trial import TrialConfig, TrialResult

ROOT = Path(__file__).resolve().parents[1]


def _cores(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += list(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def _dataset(path: Path, trajectories: int) -> Path:
    if not path.exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "agentperf.engine",
                "dataset",
                "generate",
                "--seed",
                "1",
                "--trajectories",
                str(trajectories),
                "--stdlib-only",
                "--out",
                str(path),
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
    return path


def _stats(url: str) -> dict[str, Any]:
    base = url.removesuffix("/v1")
    req = urllib.request.Request(f"{base}/stats", data=b"{}", method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        result: dict[str, Any] = json.loads(resp.read())
    return result


def _row(k: int, result: TrialResult, first: dict[str, int]) -> dict[str, Any]:
    s = result.summary
    w0, w1 = s.window_start_ns, s.window_end_ns
    events = sum(r.n_output_events for r in result.records if w0 <= r.t_send_ns < w1)
    errors = [
        (r.t_first_ns - first[r.request_id]) / 1e6
        for r in result.records
        if r.ok and r.t_first_ns is not None and r.request_id in first
    ]
    lg = result.load_generator
    per = lg.get("per_shard") or []
    cpu = [p["health"].get("cpu_percent") for p in per] or [s.client.cpu_percent]
    return {
        "shards": k,
        "agents": result.concurrency,
        "requests": s.requests,
        "events_per_s": events / s.window_s,
        "cpu_percent": [round(c, 1) if c is not None else None for c in cpu],
        "ttft_err_p50_ms": percentile(errors, 50) if errors else None,
        "ttft_err_p99_ms": percentile(errors, 99) if errors else None,
        "stamp_delay_p99_ms": s.client.stamp_delay_p99_ms,
        "healthy": s.client.healthy,
        "reason": s.client.reason,
        "peak_rss_mib": [p.get("peak_rss_mib") for p in per],
    }


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line, with ``--memory``'s own defaults filled in."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--shards", default=None, help="comma-separated K values (default 1,2; --memory: 1)"
    )
    ap.add_argument("--agents", type=int, default=256)
    ap.add_argument("--speed", type=float, default=100.0, help="stub tok/s per stream")
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--server-cores", default=None, help="e.g. 1 or 12-15 (default: last core)")
    ap.add_argument("--trajectories", type=int, default=60)
    ap.add_argument("--memory", action="store_true", help="8,192 agents in one shard process")
    ap.add_argument(
        "--saturate",
        action="store_true",
        help="streams as fast as the stub writes (capacity: events/s is what the shards take)",
    )
    args = ap.parse_args(argv)
    if not args.memory:
        args.shards = args.shards or "1,2"
    else:
        # the rack's per-agent speed (82 tok/s), 256 events per write so the stub keeps up
        args.agents, args.speed = 8192, 82.0
        args.shards = args.shards or "1"
        args.warmup, args.duration = max(args.warmup, 30.0), min(args.duration, 20.0)
    return args


def _start_stub(args: argparse.Namespace, server_cores: list[int]) -> tuple[mp.Process, str]:
    """The loopback stub in its own process pinned to ``server_cores``; (process, base URL)."""
    pack = 256 if args.memory else 1
    pace = StubConfig(
        pack=pack, interval_s=0.0 if args.saturate else pack / args.speed, ttft_s=(0.02, 0.5)
    )
    ctx = mp.get_context("spawn")
    ports = ctx.Queue()
    server = ctx.Process(target=serve, args=(ports, None, pace), daemon=True)
    server.start()
    os.sched_setaffinity(server.pid, set(server_cores))  # type: ignore[arg-type]
    return server, f"http://127.0.0.1:{ports.get(timeout=60)}/v1"


def _trial_config(args: argparse.Namespace, k: int) -> TrialConfig:
    """One K's trial: no tier, no health limits, the replay salted per K."""
    return TrialConfig(
        concurrency=args.agents,
        warmup_s=args.warmup,
        duration_s=args.duration,
        accelerators=1,
        min_requests=1,
        max_loop_lag_ms=1e9,
        max_cpu_percent=101.0,
        replay=ReplayConfig(
            model="stub",
            seed=1,
            ramp_s=args.warmup,
            namespace_salt=f"k{k}",
            count_output_tokens=False,
        ),
    )


def _measure(
    args: argparse.Namespace, url: str, dataset_path: Path, client_cores: list[int]
) -> list[dict[str, Any]]:
    """One trial per K against the stub (K > 1, or ``--memory``: in local shard processes);
    each K's row printed as JSON as it is measured."""
    work = Path(tempfile.mkdtemp(prefix="bench-shards-"))
    trajectories = load_dataset(dataset_path).trajectories
    rows = []
    for k in [int(x) for x in args.shards.split(",")]:
        sharding = None
        if k > 1 or args.memory:
            sharding = Sharding(
                executor=lambda k=k: LocalShards(
                    dataset_path=dataset_path, work_dir=work / f"k{k}", cpus=client_cores
                ),
                shards=k,
                always=True,
            )
        _stats(url)  # clear the stub's log
        result = trial_job(
            target=Target(base_url=url),
            trajectories=trajectories,
            config=_trial_config(args, k),
            sharding=sharding,
        )
        row = _row(k, result, _stats(url)["first"])
        rows.append(row)
        print(json.dumps(row))
        sys.stdout.flush()
    return rows


def _print_comparison(rows: list[dict[str, Any]], saturate: bool) -> None:
    """Each K beside K = 1: events/s, the scaling ratio (saturated runs only), CPU per
    shard, the TTFT error and the peak RSS."""
    one = next((r for r in rows if r["shards"] == 1), None)
    print(
        f"\n{'K':>3} {'events/s':>10} {'vs K x one':>10} {'CPU % per shard':>18} "
        f"{'TTFT err p50':>12} {'p99 ms':>7} {'peak MiB':>10}"
    )
    for r in rows:
        # paced streams: events/s is the offered load, the same at every K; only a saturated
        # run measures capacity, where K shards should take K times one shard's events
        ratio = (
            r["events_per_s"] / (r["shards"] * one["events_per_s"]) if one and saturate else None
        )
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        print(
            f"{r['shards']:>3} {r['events_per_s']:>10,.0f} {fmt(ratio):>10} "
            f"{','.join(str(c) for c in r['cpu_percent']):>18} {fmt(r['ttft_err_p50_ms']):>12} "
            f"{fmt(r['ttft_err_p99_ms']):>7} {','.join(str(m) for m in r['peak_rss_mib']):>10}"
        )


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    cpus = sorted(os.sched_getaffinity(0))
    server_cores = _cores(args.server_cores) if args.server_cores else [cpus[-1]]
    client_cores = [c for c in cpus if c not in server_cores] or cpus
    dataset_path = _dataset(
        ROOT / "var" / f"bench-synthetic-{args.trajectories}.jsonl.gz", args.trajectories
    )
    server, url = _start_stub(args, server_cores)
    os.sched_setaffinity(0, set(client_cores))
    speed = "as fast as it writes" if args.saturate else f"{args.speed:g} tok/s per stream"
    print(
        f"stub on cores {server_cores} ({speed}, TTFT 20-500 ms); "
        f"clients on {client_cores}; {args.agents} agents, warm-up {args.warmup:g} s, "
        f"window {args.duration:g} s"
    )
    try:
        rows = _measure(args, url, dataset_path, client_cores)
    finally:
        server.terminate()
        server.join(timeout=10)
    _print_comparison(rows, args.saturate)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
