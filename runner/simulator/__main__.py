"""``python -m runner.simulator serve|profiles|show`` — the simulated serving system's CLI."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys

from runner.simulator.profile import ProfileError, available_profiles, load_profile


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
    return ap


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
    from runner.simulator.server import serve

    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is pinned
        runner = asyncio.run

    def announce(url: str) -> None:
        print(f"listening on {url}", flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        runner(
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
