"""What one process start of the web app costs, in two source trees side by side.

    .venv/bin/python -m benchmarks.process_start --tree PATH[=LABEL] --tree PATH[=LABEL]
        [--runs 15] [--entry web|engine|cli]

Every gunicorn server, Celery worker, ``manage.py`` command and platform subprocess the
suite and a deployment start pays the web app's imports once (``django.setup()`` and the
URL map: every view module, hence every module a view imports). This starts that import in
a fresh interpreter with each tree first on ``sys.path``, the trees in turn (A B A B …, so
a drift of the machine's speed falls on both alike), and reports per tree the median and
spread of the child's user + system CPU (``os.wait4``) and its wall time, then the median
of the per-pair ratios. ``--entry engine`` times ``import agentperf.engine.cli`` (a shard or
engine subprocess) and ``--entry cli`` the vendor CLI's import instead.

The trees are checkouts (``git worktree add /tmp/before COMMIT``) sharing this virtual
environment; nothing is written.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ENTRIES = {
    "web": (
        "import os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings'); "
        "import django; django.setup(); from django.urls import resolve; resolve('/')"
    ),
    "engine": "import agentperf.engine.cli",
    "cli": "import agentperf_cli.main",
}


def one_start(tree: Path, code: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one interpreter importing ``code`` from ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{tree}: the import failed (run it by hand: python -c {code!r})")
    return usage.ru_utime + usage.ru_stime, wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", required=True, help="PATH[=LABEL], twice")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--entry", choices=sorted(ENTRIES), default="web")
    args = ap.parse_args(argv)
    if len(args.tree) != 2:
        ap.error("--tree: exactly two trees, the first is the reference")
    trees = []
    for item in args.tree:
        path, _, label = item.partition("=")
        trees.append((Path(path).resolve(), label or Path(path).name))
    code = ENTRIES[args.entry]
    for tree, _ in trees:  # one warm-up each: bytecode written, files in the page cache
        one_start(tree, code)
    cpu: list[list[float]] = [[], []]
    wall: list[list[float]] = [[], []]
    for _ in range(args.runs):
        for i, (tree, _) in enumerate(trees):
            c, w = one_start(tree, code)
            cpu[i].append(c)
            wall[i].append(w)
    print(f"entry {args.entry}: {code}")
    print(f"{args.runs} starts per tree, in turn; CPU = user + system of the child")
    print(f"{'tree':<24} {'CPU median':>11} {'CPU min-max':>15} {'wall median':>12}")
    for i, (_, label) in enumerate(trees):
        print(
            f"{label:<24} {statistics.median(cpu[i]):>10.3f}s "
            f"{min(cpu[i]):>6.3f}-{max(cpu[i]):.3f}s {statistics.median(wall[i]):>11.3f}s"
        )
    ratios = [b / a for a, b in zip(cpu[0], cpu[1], strict=True)]
    print(
        f"{trees[1][1]} / {trees[0][1]} CPU, median of the pairs: "
        f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
