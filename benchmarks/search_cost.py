"""What a full SLO-tier search on virtual time costs, and whether two code trees agree on it.

    .venv/bin/python -m benchmarks.search_cost [--tree PATH[=LABEL] ...] [--parallel]
        [--profile gb300-nvl72-dsv41-flash] [--cap 16384] [--duration 120]
        [--work /tmp/search-cost] [--against OTHER/cost.json] [--args LABEL=OPTIONS ...]

Runs ``python -m agentperf.engine search --target sim:PROFILE`` (the documented rack-scale
command, docs/benchmarks.md "Rack scale": synthetic dataset seed 1, 200 trajectories,
stdlib text; tiers 20/60/100/180/300 tok/s p25 with TTFT p75 ≤ 10/10/5/5/3 s; shipped
defaults otherwise) once per source tree (default: this checkout), each in its own process
with that tree first on ``sys.path``, and records per tree: wall time, the process's user +
system CPU and peak RSS (``os.wait4``), the trials, each trial's wall time, and the SHA-256
of every trial's ``trial.json`` and ``requests.jsonl`` (the records are deleted afterwards
unless ``--keep-records``: a full search writes ~1.5 GB of them). Virtual time is
deterministic, so two trees that compute the same thing give the same digests for every
trial; the report says which trials differ. Where they differ because a tree runs an
approximation (``--args 'new=--mean-field 512'``: docs/engine.md "Mean-field trials"), it
also prints each tier's max agents and the figures of every concurrency both searches ran,
with the approximation's error.

Each tree's engine runs with that tree's own simulator registered for ``sim:`` (``TREE_MAIN``):
the installed ``agentperf.targets`` entry point would load whichever checkout the venv was
installed from, for every tree alike. The CPU figures include the processes a search forks
to write its trial files (``os.wait4`` counts waited-for descendants).

``--parallel`` runs the trees at the same time (one core each; on a machine with other work
both are slowed alike), else one after the other. ``--against FILE`` also compares with the
``cost.json`` of an earlier run (before/after across two invocations); with ``--no-run``
it only compares those files. The first search listed (``--against`` files, then the trees
in order) is the reference the others are compared with.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TIERS = [
    {"name": "t20", "min_p25_output_speed": 20, "max_ttft_s": 10},
    {"name": "t60", "min_p25_output_speed": 60, "max_ttft_s": 10},
    {"name": "t100", "min_p25_output_speed": 100, "max_ttft_s": 5},
    {"name": "t180", "min_p25_output_speed": 180, "max_ttft_s": 5},
    {"name": "t300", "min_p25_output_speed": 300, "max_ttft_s": 3},
]
TRIAL_LINE = re.compile(rb"trial (\d+) \[(\w+)\] N=(\d+):")
# The engine's CLI with the tree's own simulator serving ``sim:``: the installed
# ``agentperf.targets`` entry point names whatever package the venv was installed from
# (docs/engine.md "Targets"), which is not the tree being measured; registering the
# tree's runner first makes each tree run its own simulator (checked by its file's path).
# The tree's domain package: agentperf/ since the split (docs/architecture.md "Packages"),
# runner/ in trees from before it, so an old commit can be measured beside a new one.
TREE_MAIN = (
    "import importlib, os, sys; "
    "pkg = 'agentperf' if os.path.isdir(os.path.join(sys.argv[1], 'agentperf')) else 'runner'; "
    "targets = importlib.import_module(pkg + '.engine.targets'); "
    "virtual = importlib.import_module(pkg + '.simulator.virtual'); "
    "assert virtual.__file__.startswith(sys.argv[1]), virtual.__file__; "
    "targets.register('sim', virtual.sim_target); "
    "main = importlib.import_module(pkg + '.engine.cli').main; "
    "sys.argv = [pkg + '.engine', *sys.argv[2:]]; raise SystemExit(main())"
)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _dataset(work: Path) -> Path:
    path = work / "syn.jsonl.gz"
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
                "200",
                "--stdlib-only",
                "--out",
                str(path),
            ],
            check=True,
            cwd=REPO,
        )
    return path


class Run:
    """One tree's search, timed: call it (in a thread with --parallel), then ``report``
    holds its wall, CPU, peak RSS and each trial's figures and hashes (also written to
    ``<work>/<label>/cost.json``)."""

    def __init__(self, tree: Path, label: str, args: argparse.Namespace, dataset: Path) -> None:
        self.tree, self.label, self.args, self.dataset = tree, label, args, dataset
        self.out = Path(args.work) / label
        self.extra = shlex.split(dict(a.split("=", 1) for a in args.args).get(label, ""))
        self.report: dict[str, Any] = {}

    def _command(self) -> list[str]:
        """The tree's own engine CLI, searching the simulated target with this run's extras."""
        a = self.args
        tiers = Path(a.work) / "tiers.json"
        return [
            sys.executable,
            "-c",
            TREE_MAIN,
            str(self.tree),
            "search",
            "--target",
            f"sim:{a.profile}",
            "--model",
            a.model,
            "--dataset",
            str(self.dataset),
            "--tiers",
            str(tiers),
            "--accelerators",
            str(a.accelerators),
            "--cap",
            str(a.cap),
            "--duration",
            str(a.duration),
            "--out",
            str(self.out),
            *self.extra,
        ]

    def _search(self, cmd: list[str]) -> tuple[float, Any, dict[int, float]]:
        """Run the search: its wall time, its resource usage (os.wait4), and when each
        trial's progress line appeared (seconds from the start, by trial index)."""
        env = dict(os.environ, PYTHONPATH=str(self.tree))
        started = time.monotonic()
        proc = subprocess.Popen(
            cmd, cwd=self.tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert proc.stdout is not None
        ends: dict[int, float] = {}
        tail: list[bytes] = []
        for line in iter(proc.stdout.readline, b""):
            for part in line.split(b"\r"):
                if m := TRIAL_LINE.search(part):
                    ends[int(m.group(1))] = time.monotonic() - started
            tail = (tail + [line])[-20:]
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        code = os.waitstatus_to_exitcode(status)
        proc.returncode = code
        if code != 0:
            raise SystemExit(f"{self.label}: search exited {code}:\n" + b"".join(tail).decode())
        return wall, usage, ends

    def _trials(self, doc: dict[str, Any], ends: dict[int, float]) -> list[dict[str, Any]]:
        """Each trial's figures, wall time and hashes of trial.json and requests.jsonl (the
        records deleted after unless --keep-records)."""
        trials = []
        previous = 0.0
        for t in doc["trials"]:
            folder = Path(t["data"]["dir"])
            records = folder / "requests.jsonl"
            summary = t["data"].get("summary") or {}
            end = ends.get(t["index"], previous)
            trials.append(
                {
                    "index": t["index"],
                    "phase": t["phase"],
                    "concurrency": t["concurrency"],
                    "requests": summary.get("requests_total"),
                    "p25_output_speed": summary.get("p25_output_speed"),
                    "ttft_p75_s": (summary.get("ttft_s") or {}).get("p75"),
                    "throughput_per_accelerator": summary.get("throughput_per_accelerator"),
                    "mean_field": (t["data"].get("mean_field") or {}).get("factor", 1),
                    "wall_s": round(end - previous, 2),
                    "trial_json_sha256": _sha256(folder / "trial.json"),
                    "requests_sha256": _sha256(records),
                }
            )
            previous = end
            if not self.args.keep_records:
                records.unlink()
        return trials

    def __call__(self) -> None:
        cmd = self._command()
        wall, usage, ends = self._search(cmd)
        doc = json.loads((self.out / "search.json").read_text())
        trials = self._trials(doc, ends)
        self.report = {
            "label": self.label,
            "tree": str(self.tree),
            "command": " ".join(cmd),
            "wall_s": round(wall, 1),
            "cpu_user_s": round(usage.ru_utime, 1),
            "cpu_system_s": round(usage.ru_stime, 1),
            "peak_rss_mb": round(usage.ru_maxrss / 1024),
            "trials": trials,
            "max_agents": doc["max_agents"],
            "flags": {k: v["flags"] for k, v in doc["tiers"].items() if v["flags"]},
        }
        (self.out / "cost.json").write_text(json.dumps(self.report, indent=2) + "\n")


def _summary(r: dict[str, Any]) -> str:
    cpu = r["cpu_user_s"] + r["cpu_system_s"]
    requests = sum(t["requests"] or 0 for t in r["trials"])
    return (
        f"{r['label']:>10}: {r['wall_s']:7.1f} s wall ({r['wall_s'] / 60:.1f} min), "
        f"{cpu:7.1f} s CPU ({cpu / 60:.1f} min; user {r['cpu_user_s']}, system "
        f"{r['cpu_system_s']}), peak RSS {r['peak_rss_mb']} MB, {len(r['trials'])} trials, "
        f"{requests:,} requests ({cpu / max(1, requests) * 1e3:.3f} ms CPU each); "
        f"max agents {r['max_agents']}" + (f"; flags {r['flags']}" if r["flags"] else "")
    )


def _compare(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    lines = []
    ta, tb = a["trials"], b["trials"]
    if [(t["concurrency"], t["phase"]) for t in ta] != [(t["concurrency"], t["phase"]) for t in tb]:
        lines.append(f"  trial sequences differ: {a['label']} vs {b['label']}")
    same = 0
    for x, y in zip(ta, tb, strict=False):
        keys = ("trial_json_sha256", "requests_sha256")
        if all(x[k] == y[k] for k in keys):
            same += 1
        else:
            lines.append(f"  trial {x['index']} N={x['concurrency']}: differs")
    lines.insert(
        0,
        f"{a['label']} vs {b['label']}: {same} of {max(len(ta), len(tb))} trials identical "
        "(trial.json and requests.jsonl byte for byte)",
    )
    if same < max(len(ta), len(tb)):
        lines += _approximation(a, b)
    return lines


def _approximation(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """How far ``b``'s search is from ``a``'s when their records differ (an approximation
    such as mean-field trials): each tier's max agents, and each concurrency both ran."""
    lines = ["  max agents per tier:"]
    for tier, n_a in a["max_agents"].items():
        n_b = b["max_agents"].get(tier)
        off = "" if not n_a or n_b is None else f" ({(n_b - n_a) / n_a:+.1%})"
        lines.append(f"    {tier}: {n_a} vs {n_b}{off}")
    first_a = {t["concurrency"]: t for t in reversed(a["trials"])}
    first_b = {t["concurrency"]: t for t in reversed(b["trials"])}
    lines.append(
        "  same N in both (first trial at each): N, slice factor, p25 tok/s, TTFT p75 s, "
        "tok/s per accelerator, each as a vs b (b's error)"
    )
    for n in sorted(set(first_a) & set(first_b)):
        x, y = first_a[n], first_b[n]
        cells = []
        for key, fmt in (
            ("p25_output_speed", "{:.1f}"),
            ("ttft_p75_s", "{:.3f}"),
            ("throughput_per_accelerator", "{:,.0f}"),
        ):
            u, v = x.get(key), y.get(key)
            if u is None or v is None:
                cells.append("-")
                continue
            err = f" ({(v - u) / u:+.1%})" if u else ""
            cells.append(f"{fmt.format(u)} vs {fmt.format(v)}{err}")
        lines.append(f"    N={n} k={y.get('mean_field', 1)}: " + "; ".join(cells))
    return lines


def _ratio(a: dict[str, Any], b: dict[str, Any]) -> str:
    cpu_a = a["cpu_user_s"] + a["cpu_system_s"]
    cpu_b = b["cpu_user_s"] + b["cpu_system_s"]
    return (
        f"{b['label']} vs {a['label']}: wall {b['wall_s'] / a['wall_s']:.2f}x "
        f"({a['wall_s'] / b['wall_s']:.2f}x faster), CPU {cpu_b / cpu_a:.2f}x "
        f"({cpu_a / cpu_b:.2f}x less)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", default=[], help="PATH[=LABEL] (repeatable)")
    ap.add_argument("--parallel", action="store_true")
    ap.add_argument("--profile", default="gb300-nvl72-dsv41-flash")
    ap.add_argument("--model", default="deepseek-v4.1-flash-max")
    ap.add_argument("--accelerators", type=int, default=72)
    ap.add_argument("--cap", type=int, default=16384)
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--work", default="/tmp/search-cost")
    ap.add_argument("--keep-records", action="store_true")
    ap.add_argument("--against", action="append", default=[], help="an earlier cost.json")
    ap.add_argument(
        "--no-run",
        action="store_true",
        help="run nothing: compare the --against files (the first is the reference)",
    )
    ap.add_argument(
        "--args",
        action="append",
        default=[],
        metavar="LABEL=ARGS",
        help="more search options for the tree LABEL, e.g. 'new=--mean-field 512'",
    )
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    (work / "tiers.json").write_text(json.dumps(TIERS))
    trees = [] if args.no_run else args.tree or [f"{REPO}=this"]
    dataset = _dataset(work) if trees else work / "syn.jsonl.gz"
    runs = []
    for spec in trees:
        path, _, label = spec.partition("=")
        runs.append(Run(Path(path).resolve(), label or Path(path).name, args, dataset))
    if args.parallel:
        threads = [threading.Thread(target=r) for r in runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for r in runs:
            r()
    reports = [r.report for r in runs if r.report]
    earlier = [json.loads(Path(p).read_text()) for p in args.against]
    for r in earlier + reports:
        print(_summary(r))
    everything = earlier + reports
    for other in everything[1:]:
        print("\n".join(_compare(everything[0], other)))
        print(_ratio(everything[0], other))


if __name__ == "__main__":
    main()
