"""``python -m runner.simulator serve|profiles|show|calibrate`` — the simulated serving
system's CLI."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys

import uvloop

from runner.simulator.profile import Profile, ProfileError, available_profiles, load_profile


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m runner.simulator")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve a profile over HTTP in real time")
    s.add_argument("--profile", required=True, help="profile name or YAML path")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--catalog-dir", default=None)
    s.add_argument(
        "--ground-truth",
        action="store_true",
        help="keep true emission times and serve them at /debug/ground_truth",
    )
    s.add_argument(
        "--cheat",
        default=None,
        help="dishonest modes for verification tests (comma-separated): truncated, padded, "
        "cache_shared, other_model, fake_spec, fewer_accelerators",
    )
    sub.add_parser("profiles", help="list the bundled profiles")
    sh = sub.add_parser("show", help="print a profile's resolved parameters and sources")
    sh.add_argument("--profile", required=True)
    sh.add_argument("--catalog-dir", default=None)
    cal = sub.add_parser(
        "calibrate",
        help="engine trials on virtual time along a concurrency sweep: frontier at speeds, "
        "single/two-agent speed, %% error to published points",
    )
    cal.add_argument("--profile", required=True)
    cal.add_argument("--catalog-dir", default=None)
    cal.add_argument("--at", default="220,82", help="per-agent p25 speeds (tok/s), comma list")
    cal.add_argument("--points", default=None, help="published points (YAML/JSON) to compare")
    cal.add_argument(
        "--dataset",
        default=None,
        help="dataset file (default: the synthetic set, seed 1, 200 trajectories, stdlib text)",
    )
    cal.add_argument(
        "--concurrency", default=None, help="comma list (default: 1, 2, 4, 16, 64 … 12288)"
    )
    cal.add_argument("--warmup", type=float, default=60.0, help="virtual seconds")
    cal.add_argument("--duration", type=float, default=120.0, help="window, virtual seconds")
    cal.add_argument("--ramp", type=float, default=30.0, help="virtual seconds")
    cal.add_argument("--seed", type=int, default=0)
    cal.add_argument(
        "--full", action="store_true", help="run every concurrency (no stop below the slowest)"
    )
    return ap


def _calibrate(args: argparse.Namespace, profile: Profile) -> int:
    from runner.simulator import calibrate as cal

    try:
        at = [float(x) for x in args.at.split(",") if x.strip()]
        sweep = (
            [int(x) for x in args.concurrency.split(",") if x.strip()]
            if args.concurrency
            else list(cal.DEFAULT_SWEEP)
        )
        published = cal.load_points(args.points) if args.points else None
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if published:
        at = sorted({*at, *published["frontier"]}, reverse=True)
    if args.dataset:
        from runner.engine.trajectory import load_dataset

        trajectories = load_dataset(args.dataset).trajectories
    else:
        from runner.engine.datasets.corpus import build_corpus
        from runner.engine.datasets.synthetic import generate_dataset
        from runner.engine.tokens import TokenCounter

        counter = TokenCounter()
        corpus = build_corpus(counter, discover=False)
        trajectories = generate_dataset(
            seed=1, trajectories=200, corpus=corpus, counter=counter
        ).trajectories

    def on_point(p: cal.SweepPoint) -> None:
        print(
            f"trial N={p.concurrency}: p25 {p.p25_speed:.1f} tok/s, TTFT p75 "
            f"{p.ttft_p75_s:.3f} s, {p.throughput_per_accelerator:,.0f} tok/s per accelerator",
            flush=True,
        )

    points = cal.run_sweep(
        profile,
        trajectories,
        concurrencies=sweep,
        stop_below=None if args.full or not at else min(at),
        on_point=on_point,
        warmup_s=args.warmup,
        duration_s=args.duration,
        ramp_s=args.ramp,
        seed=args.seed,
    )
    print(cal.report(profile, points, at=at, published=published))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "profiles":
            for name in available_profiles():
                print(name)
            return 0
        profile = load_profile(args.profile, catalog_dir=args.catalog_dir)
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.cmd == "show":
        from runner.simulator.calibrate import describe

        print(json.dumps(describe(profile), indent=2))
        return 0
    if args.cmd == "calibrate":
        return _calibrate(args, profile)
    from runner.simulator.server import serve

    def announce(url: str) -> None:
        print(f"listening on {url}", flush=True)

    async def until_signalled() -> None:
        """Serve until SIGTERM or SIGINT, then close cleanly. Handled by the loop, not as a
        KeyboardInterrupt (which a transport callback would swallow), and set here, so a
        server started from a background job (SIGINT inherited ignored) stops too."""
        task = asyncio.ensure_future(
            serve(
                profile,
                host=args.host,
                port=args.port,
                seed=args.seed,
                ground_truth=args.ground_truth,
                announce=announce,
                cheat=args.cheat,
            )
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    uvloop.run(until_signalled())
    return 0


if __name__ == "__main__":
    sys.exit(main())
