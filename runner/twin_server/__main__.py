"""``python -m runner.twin_server --profile NAME`` — the simulated serving system as a real-time
HTTP server on the pool host (docs/simulator.md); prints ``listening on http://H:P``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

import uvloop

from agentperf.simulator.behaviour import load_behaviour
from agentperf.simulator.profile import ProfileError, load_profile
from runner.twin_server.server import serve


def _parser() -> argparse.ArgumentParser:
    s = argparse.ArgumentParser(
        prog="python -m runner.twin_server", description="serve a profile over HTTP in real time"
    )
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
        "--behaviour",
        default=None,
        metavar="MODULE:FACTORY[=ARG]",
        help="how the deployment answers, a plugin loaded by name (default: as the model "
        "says); the verification tests' dishonest modes: tests.support.dishonest:parse=MODES",
    )
    return s


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        profile = load_profile(args.profile, catalog_dir=args.catalog_dir)
        behaviour = load_behaviour(args.behaviour)
    except (ProfileError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

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
                behaviour=behaviour,
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
