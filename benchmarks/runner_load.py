"""The runner API under load on both database profiles: every 5xx and every run whose two
sides disagree, counted (docs/benchmarks.md "Runner API under load", docs/pipeline.md
"Contention"). Both must be 0.

For each profile, a throwaway site: SQLite in a temporary folder (the embedded profile), or
a fresh database on the PostgreSQL server `--database-url` names (dropped after). Artifacts
in a local folder, the shared cache in the database, the broker kombu's SQLite file, on
both. Migrated, seeded, a few results published; served by gunicorn as `make demo` serves
it (`-w 2 --threads 4`). Then, at once:

- `--runs` benchmark runs, each made by dispatch's `run_prepare` and run by the pool
  worker's own code (`runner.worker.execute.execute_run`: the simulated launcher on virtual
  time, a small search) in `--workers` processes: start, heartbeats, qualification,
  uploads (grant + PUT), trials and completion through the runner API;
- `--kill` of them killed (SIGKILL) once their completion is sent, before its answer, then
  delivered again to a fresh process, as the broker redelivers an unacknowledged task;
- a reviewer publishing each run that reaches review (`review.services.review_publish`,
  the page rebuild inline), and the reaper (`reap_stale_runs`) between passes, as the demo;
- `--readers` threads reading public pages and the public API;
- `--vendors` threads submitting the simulated example through the vendor API.

The site itself (environment, database, data, gunicorn) is benchmarks/runner_load_site.py.
Every response's status comes from gunicorn's access log; "disagree" counts the runs whose
final state on the site (run done, failed or cancelled) is not the one a worker's outcome
reports (`run_status`, runner/worker/director.py), or that never reached a final state.

    .venv/bin/python -m benchmarks.runner_load                      # both profiles
    .venv/bin/python -m benchmarks.runner_load --profile sqlite --runs 4 --json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.runner_load_site import (
    REPO,
    free_port,
    postgres_database,
    prepare,
    site_env,
    start_site,
    stop,
    wait_site,
)

PROFILES = ("sqlite", "postgresql")
DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/agentperf"
RUNNER_PATH = re.compile(r"^/api/v1/runner/runs/\d+/(?P<what>[a-z]*)")
SITE_SETTLED = ("published", "failed", "withdrawn", "rejected")


# --- the pool worker's side: spawned processes, no Django ---------------------------------


def run_spec(spec: dict[str, Any], work_dir: str) -> dict[str, Any]:
    """One delivery of a run's task message, as `runner.execute_run` runs it."""
    from runner.worker.execute import execute_run

    return execute_run(spec, work_dir=work_dir)


def run_killed_mid_completion(spec: dict[str, Any], work_dir: str) -> None:
    """One delivery whose worker dies once its completion is on the wire: the request is
    sent whole, then the process is SIGKILLed before it reads the answer."""
    from runner.worker.execute import RunExecution

    execution = RunExecution(spec, work_dir=work_dir)
    api = execution.api

    def complete(document: Any) -> None:
        url = urllib.parse.urlsplit(api.base_url + "complete")
        conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 80)
        body = json.dumps(document.dump()).encode()
        conn.request("POST", url.path, body, api._headers({"Content-Type": "application/json"}))
        os.kill(os.getpid(), signal.SIGKILL)

    execution.director.reporter.complete = complete  # type: ignore[method-assign]
    execution.run()


def _deliveries(runs: list[dict], kill: int, workers: int, folder: Path) -> dict[int, list]:
    """Run every run's task in `workers` processes; the first `kill` runs' first delivery
    is killed mid-completion and delivered again. {run id: [outcome, ...]}."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    outcomes: dict[int, list] = {r["id"]: [] for r in runs}
    work_dir = str(folder / "work")
    killed = runs[:kill]

    def redeliver(run: dict) -> tuple[int, dict]:
        process = context.Process(target=run_killed_mid_completion, args=(run["spec"], work_dir))
        process.start()
        process.join()
        outcomes[run["id"]].append({"status": "killed", "exitcode": process.exitcode})
        with ProcessPoolExecutor(1, mp_context=context) as again:
            return run["id"], again.submit(run_spec, run["spec"], work_dir).result()

    with ProcessPoolExecutor(max(1, workers - len(killed)), mp_context=context) as pool:
        futures = [
            (r["id"], pool.submit(run_spec, r["spec"], work_dir)) for r in runs[len(killed) :]
        ]
        threads = []
        results: list[tuple[int, dict]] = []
        for run in killed:
            thread = threading.Thread(target=lambda r=run: results.append(redeliver(r)))
            thread.start()
            threads.append(thread)
        for run_id, future in futures:
            outcomes[run_id].append(future.result())
        for thread in threads:
            thread.join()
    for run_id, outcome in results:
        outcomes[run_id].append(outcome)
    return outcomes


# --- traffic beside the runs ---------------------------------------------------------------


def _reader(base: str, paths: list[str], done: threading.Event, seen: Counter) -> None:
    i = 0
    while not done.is_set():
        path = paths[i % len(paths)]
        i += 1
        accept = "application/json" if path.startswith("/api/") else "text/html"
        request = urllib.request.Request(base + path, headers={"Accept": accept})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                response.read()
                seen[response.status] += 1
        except urllib.error.HTTPError as exc:
            seen[exc.code] += 1
        except OSError:
            seen[0] += 1


def _vendor(base: str, token: str, text: str, done: threading.Event, seen: Counter) -> None:
    while not done.is_set():
        request = urllib.request.Request(
            base + "/api/v1/submissions/",
            data=text.encode(),
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                response.read()
                seen[response.status] += 1
        except urllib.error.HTTPError as exc:
            seen[exc.code] += 1
        except OSError:
            seen[0] += 1
        done.wait(0.5)  # a vendor's pace, not a flood


def _publisher(run_ids: list[int], reviewer: str, done: threading.Event, seen: Counter) -> None:
    """The demo's reviewer: publish each run that reaches review; the reaper between
    passes (demo/steps.py demo_runs)."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from core.contention import is_contention
    from review.services import ReviewError, review_publish
    from runs.services import reap_stale_runs
    from submissions.models import Submission

    actor = get_user_model().objects.get(username=reviewer)
    try:
        while not done.is_set():
            try:
                reap_stale_runs()
                for submission in Submission.objects.filter(
                    runs__pk__in=run_ids, status="in_review"
                ):
                    try:
                        review_publish(
                            submission=submission, actor=actor, reason="runner load: publish"
                        )
                        seen["published"] += 1
                    except ReviewError:
                        seen["refused"] += 1
            except Exception as exc:  # busy: the next pass publishes it, as a reviewer would
                if not is_contention(exc):
                    raise
                seen["busy"] += 1
            done.wait(0.2)
    except Exception as exc:
        seen[f"crashed: {type(exc).__name__}: {exc}"] += 1
        raise
    finally:
        connection.close()


def _settled(run_ids: list[int]) -> bool:
    from runs.models import BenchmarkRun

    runs = BenchmarkRun.objects.filter(pk__in=run_ids).select_related("submission")
    return all(
        r.status in BenchmarkRun.FINAL_STATES and r.submission.status in SITE_SETTLED for r in runs
    )


# An outcome without `run_status` (a worker before it, `--site-dir`) claims what its status says.
CLAIMED = {"completed": "done", "failed": "failed", "cancelled": "cancelled"}


def claimed(outcome: dict[str, Any]) -> str | None:
    """The run's final state a worker's outcome reports; None: it claims none."""
    if "run_status" in outcome:
        return outcome["run_status"]
    return CLAIMED.get(outcome.get("status", ""))


def disagreements(outcomes: dict[int, list]) -> list[dict[str, Any]]:
    """Runs whose site state is not final, or is not what a worker's outcome reports."""
    from runs.models import BenchmarkRun

    out = []
    for run in BenchmarkRun.objects.filter(pk__in=list(outcomes)).select_related("submission"):
        said = sorted({s for o in outcomes[run.pk] if (s := claimed(o))})
        final = run.status in BenchmarkRun.FINAL_STATES
        if not final or any(s != run.status for s in said):
            out.append(
                {
                    "run": run.pk,
                    "site": f"{run.status}/{run.submission.status}",
                    "workers": [f"{o.get('status')}:{claimed(o)}" for o in outcomes[run.pk]],
                }
            )
    return out


RUNNER_WRITES = ("start", "heartbeat", "qualification", "uploads", "blobs", "trials", "complete")


def access_counts(log: Path) -> dict[str, Any]:
    """Responses by kind and by status, and the runner API writes' times (ms), from
    gunicorn's access log (method, path, status, microseconds)."""
    kinds: Counter = Counter()
    statuses: Counter = Counter()
    errors: Counter = Counter()
    writes_ms: list[float] = []
    for line in log.read_text().splitlines():
        fields = line.split(" ")
        if len(fields) != 4 or not fields[2].isdigit():
            continue
        method, path, status, micros = fields[0], fields[1], int(fields[2]), fields[3]
        found = RUNNER_PATH.match(path)
        if found:
            kind = found.group("what") or "run"
        elif path.startswith("/api/v1/submissions"):
            kind = "submissions"
        elif method == "GET":
            kind = "reads"
        else:
            kind = "other"
        kinds[kind] += 1
        statuses[status] += 1
        if status >= 500:
            errors[f"{method} {kind} {status}"] += 1
        if kind in RUNNER_WRITES and micros.isdigit():
            writes_ms.append(int(micros) / 1000)
    writes_ms.sort()

    def at(q: float) -> float:
        return writes_ms[min(len(writes_ms) - 1, int(q * len(writes_ms)))] if writes_ms else 0.0

    return {
        "kinds": dict(kinds),
        "statuses": dict(statuses),
        "errors": dict(errors),
        "writes_ms": {"p50": at(0.5), "p99": at(0.99), "max": writes_ms[-1] if writes_ms else 0.0},
    }


@dataclass
class Load:
    """What one load pass saw: each run's worker outcomes, the clients' statuses, the
    reviewer's tally, and the set-up and load times."""

    run_ids: list[int]
    outcomes: dict[int, list]
    reads: Counter
    submissions: Counter
    publishes: Counter
    set_up_s: float
    load_s: float


def _profile_database(args: argparse.Namespace) -> tuple[tuple[str, str] | None, str | None]:
    """The PostgreSQL profile's fresh database, made on `--database-url`'s server:
    ((server URL, name) to drop after, its URL); (None, None) on SQLite."""
    if args.one != "postgresql":
        return None, None
    name = f"agentperf_runner_load_{uuid.uuid4().hex[:8]}"
    return (args.database_url, name), postgres_database(args.database_url, True, name)


def _traffic(
    args: argparse.Namespace,
    base: str,
    prepared: dict[str, Any],
    reads: Counter,
    submitted: Counter,
) -> tuple[list[threading.Thread], threading.Event]:
    """The readers' and vendors' threads (not started) and the event that stops them."""
    done = threading.Event()
    threads = [
        threading.Thread(target=_reader, args=(base, prepared["paths"], done, reads))
        for _ in range(args.readers)
    ]
    threads += [
        threading.Thread(
            target=_vendor,
            args=(base, prepared["vendor_token"], prepared["config_text"], done, submitted),
        )
        for _ in range(args.vendors)
    ]
    return threads, done


def _load(
    args: argparse.Namespace, folder: Path, base: str, prepared: dict[str, Any], started: float
) -> Load:
    """Run every run through the pool workers while readers, vendors and the reviewer load
    the site; wait (at most `--settle-s`) for the runs to settle, then stop the traffic."""
    set_up_s = time.monotonic() - started
    run_ids = [r["id"] for r in prepared["runs"]]
    reads: Counter = Counter()
    submissions: Counter = Counter()
    publishes: Counter = Counter()
    threads, done = _traffic(args, base, prepared, reads, submissions)
    publisher_done = threading.Event()
    publisher = threading.Thread(
        target=_publisher, args=(run_ids, prepared["reviewer"], publisher_done, publishes)
    )
    load_started = time.monotonic()
    for thread in [*threads, publisher]:
        thread.start()
    outcomes = _deliveries(prepared["runs"], args.kill, args.workers, folder)
    deadline = time.monotonic() + args.settle_s
    while not _settled(run_ids) and time.monotonic() < deadline:
        time.sleep(0.2)
    done.set()
    publisher_done.set()
    for thread in [*threads, publisher]:
        thread.join()
    load_s = time.monotonic() - load_started
    return Load(run_ids, outcomes, reads, submissions, publishes, set_up_s, load_s)


def _row(args: argparse.Namespace, load: Load, folder: Path) -> dict[str, Any]:
    """One profile's figures: the access log's counts, the disagreements, the timings."""
    disagree = disagreements(load.outcomes)
    access = access_counts(folder / "access.log")
    kinds = access["kinds"]
    fivexx = sum(n for s, n in access["statuses"].items() if s >= 500)
    return {
        "profile": args.one,
        "runs": len(load.run_ids),
        "killed": args.kill,
        "workers": args.workers,
        "heartbeats": kinds.get("heartbeat", 0),
        "uploads": kinds.get("uploads", 0) + kinds.get("blobs", 0),
        "trials": kinds.get("trials", 0),
        "completions": kinds.get("complete", 0),
        "publishes": load.publishes["published"],
        "publisher": dict(load.publishes),
        "reads": kinds.get("reads", 0),
        "submissions": load.submissions.get(201, 0) + load.submissions.get(200, 0),
        "requests": sum(kinds.values()),
        "5xx": fivexx,
        "503": access["statuses"].get(503, 0),
        "errors": access["errors"],
        "write_p50_ms": round(access["writes_ms"]["p50"], 1),
        "write_p99_ms": round(access["writes_ms"]["p99"], 1),
        "write_max_ms": round(access["writes_ms"]["max"], 1),
        "lock_timeout_s": args.lock_timeout,
        "disagree": len(disagree),
        "disagreements": disagree,
        "outcomes": {str(k): v for k, v in load.outcomes.items()},
        "client_statuses": {
            "reads": dict(load.reads),
            "submissions": dict(load.submissions),
        },
        "set_up_s": round(load.set_up_s, 1),
        "load_s": round(load.load_s, 1),
    }


def one_profile(args: argparse.Namespace) -> dict[str, Any]:
    """Prepare the site, load it, count; run in its own process (one Django setup)."""
    folder = Path(args.folder)
    port = free_port()
    database, url = _profile_database(args)
    env = site_env(folder, args.one, port, url)
    env["DATABASE_LOCK_TIMEOUT_S"] = str(args.lock_timeout)
    os.environ.clear()  # the profile's settings only: none of the caller's services
    os.environ.update(env)
    # the reviewer's page rebuild runs inline in this process, as a web worker would run it
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "1"
    try:
        started = time.monotonic()
        prepared = prepare(folder, args.runs)
        if args.prepare_only:
            return {"prepared": str(folder / "prepared.json"), "port": port}
        from django.db import connections

        connections.close_all()
        site = start_site(folder, env, port)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_site(base, site, folder / "web.log")
            load = _load(args, folder, base, prepared, started)
        finally:
            stop(site)
        return _row(args, load, folder)
    finally:
        if database is not None:
            from django.db import connections

            connections.close_all()
            postgres_database(database[0], False, database[1])


COLUMNS = [
    ("profile", "profile", "{}"),
    ("runs", "runs (killed)", None),
    ("heartbeats", "heartbeats", "{}"),
    ("uploads", "uploads", "{}"),
    ("trials", "trials", "{}"),
    ("completions", "completions", "{}"),
    ("publishes", "publishes", "{}"),
    ("reads", "page/API reads", "{}"),
    ("submissions", "submissions", "{}"),
    ("writes", "runner writes p50 / p99 / max ms", None),
    ("5xx", "5xx (503)", None),
    ("disagree", "disagree", "{}"),
    ("load_s", "load s", "{}"),
]


def table(rows: list[dict[str, Any]]) -> str:
    """The figures as a Markdown table (docs/benchmarks.md)."""
    head = "| " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in COLUMNS) + "|"
    lines = [head, rule]
    for row in rows:
        cells = []
        for key, _, fmt in COLUMNS:
            if key == "runs":
                cells.append(f"{row['runs']} ({row['killed']})")
            elif key == "writes":
                cells.append(
                    f"{row['write_p50_ms']:.0f} / {row['write_p99_ms']:.0f} / "
                    f"{row['write_max_ms']:.0f}"
                )
            elif key == "5xx":
                cells.append(f"{row['5xx']} ({row['503']})")
            else:
                cells.append(str(fmt).format(row[key]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md "Runner API under load")."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--profile", choices=[*PROFILES, "both"], default="both")
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--workers", type=int, default=4, help="pool worker processes")
    parser.add_argument("--kill", type=int, default=2, help="runs killed mid-completion")
    parser.add_argument("--readers", type=int, default=4, help="public read threads")
    parser.add_argument("--vendors", type=int, default=2, help="vendor submit threads")
    parser.add_argument("--settle-s", type=float, default=300.0, help="most to wait for review")
    parser.add_argument(
        "--lock-timeout",
        type=int,
        default=20,
        help="the site's DATABASE_LOCK_TIMEOUT_S (a short one shows the 503 path under load)",
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("RUNNER_LOAD_DATABASE_URL")
        or os.environ.get("TEST_DATABASE_URL")
        or DEFAULT_DATABASE_URL,
        help="the PostgreSQL server (a fresh database is made on it and dropped after)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document per profile")
    parser.add_argument("--one", choices=PROFILES, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--prepare-only", action="store_true", help=argparse.SUPPRESS)
    return parser


def _run_profiles(args: argparse.Namespace) -> list[dict[str, Any]] | int:
    """Each profile in a child process of its own (`--one`) in a temporary folder: its
    row, or the first failing child's exit status (its output tail on stderr)."""
    profiles = PROFILES if args.profile == "both" else (args.profile,)
    rows = []
    for profile in profiles:
        with tempfile.TemporaryDirectory(prefix=f"agentperf-runner-load-{profile}-") as tmp:
            child = [
                sys.executable, "-m", "benchmarks.runner_load", "--one", profile,
                "--folder", tmp, "--runs", str(args.runs), "--workers", str(args.workers),
                "--kill", str(args.kill), "--readers", str(args.readers),
                "--vendors", str(args.vendors), "--settle-s", str(args.settle_s),
                "--lock-timeout", str(args.lock_timeout),
                "--database-url", args.database_url,
            ]  # fmt: skip
            done = subprocess.run(child, cwd=REPO, capture_output=True, text=True)
            if done.returncode != 0:
                sys.stderr.write(done.stdout[-5000:] + done.stderr[-5000:])
                return done.returncode
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return rows


def _report(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """The set-up line, the table, then every 5xx, reviewer refusal and disagreement."""
    print(
        f"{args.runs} runs ({args.kill} killed mid-completion and delivered again) in "
        f"{args.workers} worker processes, {args.readers} readers, {args.vendors} vendors; "
        f"gunicorn -w 2 --threads 4; lock timeout {args.lock_timeout} s; {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}\n"
    )
    print(table(rows))
    for row in rows:
        for what, n in sorted(row["errors"].items()):
            print(f"{row['profile']}: {n} × {what}")
        for what, n in sorted(row["publisher"].items()):
            if what != "published":
                print(f"{row['profile']}: reviewer {what} × {n}")
        for d in row["disagreements"]:
            print(f"{row['profile']}: run {d['run']} site {d['site']}, workers {d['workers']}")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.kill > args.runs:
        parser.error("--kill cannot exceed --runs")
    if args.one:
        print(json.dumps(one_profile(args)), flush=True)
        return 0
    rows = _run_profiles(args)
    if isinstance(rows, int):
        return rows
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    _report(args, rows)
    return 0 if all(r["5xx"] == 0 and r["disagree"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
