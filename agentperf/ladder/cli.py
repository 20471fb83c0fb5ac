"""``python -m agentperf.engine ladder --steps LADDER.yaml --out DIR`` (docs/engine.md "ladder").

The engine CLI adds this command through the ``agentperf.engine_commands`` entry point
(pyproject.toml): the engine does not import the ladder, which imports the engine."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agentperf.engine.commands import CliError, Subcommands
from agentperf.ladder.document import ORDERS
from agentperf.ladder.measure import run_ladder
from agentperf.ladder.report import print_summary
from agentperf.ladder.spec import LadderError, load_ladder


def add_ladder_command(sub: Subcommands) -> None:
    p = sub.add_parser("ladder", help="measure a ladder of changes and attribute the gain")
    p.add_argument("--steps", required=True, help="ladder YAML (docs/engine.md 'ladder')")
    p.add_argument("--out", required=True, help="output folder (ladder.json, ladder.html)")
    p.add_argument(
        "--order",
        action="append",
        choices=ORDERS,
        help="forward (default), reverse or leave_one_out; repeat for several side by side",
    )
    p.add_argument("--speeds", help="extra speeds, tok/s per agent, comma-separated")
    p.add_argument("--resamples", type=int, help="bootstrap resamples (default: the file's)")
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    p.set_defaults(func=cmd_ladder)


def cmd_ladder(args: argparse.Namespace) -> int:
    try:
        spec = load_ladder(args.steps)
        if args.speeds:
            try:
                spec.speeds += [float(x) for x in args.speeds.split(",") if x.strip()]
            except ValueError:
                raise LadderError("--speeds: comma-separated numbers") from None
        if args.resamples is not None:
            spec.resamples = max(0, args.resamples)
        spec.api_key = args.api_key
        doc = run_ladder(spec, args.out, orders=args.order, log=lambda m: print(m, flush=True))
    except LadderError as exc:
        raise CliError(str(exc)) from None
    print_summary(doc, sys.stdout)
    print(f"wrote {Path(args.out) / 'ladder.json'} and ladder.html")
    return 0
