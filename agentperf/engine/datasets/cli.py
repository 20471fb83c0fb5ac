"""``python -m agentperf.engine dataset import|generate|stats`` (wired in agentperf/engine/cli.py)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any

from agentperf.engine.datasets.stats import dataset_stats, format_stats
from agentperf.engine.tokens import TokenCounter
from agentperf.engine.trajectory import Dataset, load_dataset, save_dataset

AA_FROM_PYPI = "agentperf-local"


def add_dataset_commands(subparsers: Any) -> None:
    """Add ``import``, ``generate`` and ``stats`` to a ``dataset`` subparsers object."""
    imp = subparsers.add_parser("import", help="import recorded sessions as a dataset")
    imp.add_argument("--format", required=True, choices=("aa-local", "opencode"))
    imp.add_argument(
        "src",
        help=(
            "aa-local: the agentperf-local wheel, a replays folder, or "
            f"'{AA_FROM_PYPI}' to download the pinned wheel; opencode: an export file or "
            "a folder of them"
        ),
    )
    imp.add_argument("--out", required=True, help="output dataset file (.jsonl.gz)")
    imp.add_argument("--name", help="dataset name (default: per format)")
    imp.add_argument("--version", dest="dataset_version", help="dataset version")
    imp.add_argument(
        "--replay", action="append", help="aa-local: only this replay folder (repeatable)"
    )
    imp.add_argument(
        "--no-token-counts", action="store_true", help="skip local per-message token counts"
    )
    imp.set_defaults(func=cmd_import)

    gen = subparsers.add_parser("generate", help="generate a seeded synthetic dataset")
    gen.add_argument("--seed", type=int, required=True)
    gen.add_argument("--trajectories", type=int, required=True)
    gen.add_argument("--out", required=True, help="output dataset file (.jsonl.gz)")
    gen.add_argument("--name", default="synthetic")
    gen.add_argument("--version", dest="dataset_version", help="default: seed<S>-n<N>")
    gen.add_argument(
        "--shape",
        choices=("coding", "decode-heavy"),
        default="coding",
        help="coding (default): the published agentic-coding shape; decode-heavy: long "
        "reasoning outputs, 2k-16k tokens (docs/datasets.md)",
    )
    gen.add_argument(
        "--stdlib-only",
        action="store_true",
        help="use only Python stdlib text (other languages translated): same on every machine",
    )
    gen.set_defaults(func=cmd_generate)

    st = subparsers.add_parser("stats", help="print a dataset's distributions")
    st.add_argument("path")
    st.add_argument("--json", action="store_true", help="JSON instead of a table")
    st.set_defaults(func=cmd_stats)


def _report(ds: Dataset, path: str, digest: str, started: float) -> None:
    print(
        f"wrote {path}: {len(ds.trajectories)} trajectories, {ds.turn_count()} turns, "
        f"sha256 {digest} ({time.monotonic() - started:.1f} s)"
    )


def cmd_import(args: argparse.Namespace) -> int:
    started = time.monotonic()
    counter = None if args.no_token_counts else TokenCounter()
    if args.format == "aa-local":
        from agentperf.engine.datasets.aa_local import fetch_wheel, import_aa_local

        src = str(fetch_wheel()) if args.src == AA_FROM_PYPI else args.src
        ds = import_aa_local(
            src,
            replays=args.replay,
            counter=counter,
            name=args.name or "aa-agentperf-local",
            version=args.dataset_version,
        )
    else:
        from agentperf.engine.datasets.opencode import import_opencode

        ds = import_opencode(
            args.src,
            counter=counter,
            name=args.name or "opencode",
            version=args.dataset_version or "1",
        )
    digest = save_dataset(args.out, ds)
    _report(ds, args.out, digest, started)
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from agentperf.engine.datasets.corpus import build_corpus
    from agentperf.engine.datasets.synthetic import SHAPES, generate_dataset
    from agentperf.engine.trajectory import with_output_kind

    if args.trajectories < 1:
        raise ValueError("--trajectories must be at least 1")
    started = time.monotonic()
    counter = TokenCounter()
    corpus = build_corpus(counter, discover=not args.stdlib_only)
    ds = generate_dataset(
        seed=args.seed,
        trajectories=args.trajectories,
        corpus=corpus,
        counter=counter,
        params=SHAPES[args.shape],
        name=args.name,
        version=args.dataset_version,
    )
    if args.shape == "decode-heavy":  # a reasoning trace is prose (docs/datasets.md)
        ds = dataclasses.replace(
            ds,
            trajectories=with_output_kind(ds.trajectories, "prose"),
            metadata={**ds.metadata, "workload": "decode-heavy"},
        )
    digest = save_dataset(args.out, ds)
    _report(ds, args.out, digest, started)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    ds = load_dataset(args.path)
    stats = dataset_stats(ds)
    if args.json:
        doc = {"name": ds.name, "version": ds.version, "digest": ds.digest(), **stats.to_dict()}
        json.dump(doc, sys.stdout, indent=2)
        print()
    else:
        print(f"{ds.name} {ds.version}  sha256 {ds.digest()}")
        print(format_stats(stats))
    return 0
