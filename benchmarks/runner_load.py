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
import socket
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
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PROFILES = ("sqlite", "postgresql")
DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/agentperf"
# A small search on virtual time: a run is a few seconds of the worker's CPU.
SEARCH = {
    "warmup_s": 10.0,
    "duration_s": 30.0,
    "cap": 4,
    "max_trials": 3,
    "min_requests": 8,
    "tool_delay_scale": 0.5,
    "request_timeout_s": 600.0,
    "max_loop_lag_ms": 1000.0,
    "max_cpu_percent": 100.0,
    "prime_cache": False,
}
RUNNER_PATH = re.compile(r"^/api/v1/runner/runs/\d+/(?P<what>[a-z]*)")
SITE_SETTLED = ("published", "failed", "withdrawn", "rejected")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def site_env(
    folder: Path, profile: str, port: int, database_url: str | None = None
) -> dict[str, str]:
    """The environment of the throwaway site (web server, driver and pool workers alike)."""
    env = dict(os.environ)
    for name in (
        "CACHE_REDIS_URL",
        "S3_ENDPOINT_URL",
        "S3_ACCESS_KEY_ID",
        "S3_SECRET_ACCESS_KEY",
        "CELERY_BROKER_URL",
        "CELERY_RESULT_BACKEND",
        "DATABASE_URL",
        "CELERY_TASK_ALWAYS_EAGER",
    ):
        env.pop(name, None)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "AGENTPERF_VAR_DIR": str(folder / "var"),
            "HTTPS": "0",
            "RUNNER_API_BASE_URL": f"http://127.0.0.1:{port}",
            "RUNNER_TOKEN_KEY": "runner-load-" + "k" * 32,  # pool hosts derive tokens with it
            "RUN_HEARTBEAT_INTERVAL_S": "1",
            "RUN_DATASET_TRAJECTORIES": "12",
            "RUN_DATASET_SMALL_TRAJECTORIES": "12",
            "RUN_SEARCH_OPTIONS_BY_POOL": json.dumps({"simulated-virtual": SEARCH}),
            # the load is this script's own: no throttle stands between it and the database
            "THROTTLE_ANON": "10000000/hour",
            "THROTTLE_VENDOR": "10000000/hour",
            "THROTTLE_VENDOR_SUBMIT": "10000000/hour",
            "RECEIPT_SIGNING_KEY_FILE": str(folder / "receipt-key.pem"),
            "PYTHONPATH": str(REPO),
        }
    )
    if profile == "postgresql":
        if not database_url:
            raise ValueError("the postgresql profile needs a database URL")
        env["DATABASE_URL"] = database_url
    return env


def postgres_database(server_url: str, create: bool, name: str) -> str:
    """Create (or drop) database ``name`` on the server of ``server_url``; its URL."""
    import psycopg

    parts = urllib.parse.urlsplit(server_url)
    admin = urllib.parse.urlunsplit(parts._replace(path="/postgres", query=""))
    with psycopg.connect(admin, autocommit=True) as conn:
        if create:
            conn.execute(f'CREATE DATABASE "{name}"')
        else:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def prepare(folder: Path, runs: int) -> dict[str, Any]:
    """Inside the site's Django: migrate, seed, publish a few results for the pages, make
    `runs` runs through dispatch's own `run_prepare`, a vendor token and a reviewer; what
    the load needs, also written to `folder/prepared.json`."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    call_command("createcachetable", verbosity=0)
    from catalog.services import catalog_seed
    from demo.synthetic import make_hardware, make_model, make_org, make_published_result
    from runs.dispatch import run_prepare, run_token_for
    from submissions import constants as c
    from submissions.models import Submission
    from submissions.schema import parse_config
    from submissions.services.tokens import api_token_create

    catalog_seed()
    model = make_model(slug="load-model", name="Load model")
    systems = [make_hardware(name=f"Load system {i}") for i in range(2)]
    bench_org = make_org("Load bench")
    results = [
        make_published_result(model=model, hardware=systems[i % 2], org=bench_org) for i in range(4)
    ]
    org = make_org("Load vendor")
    _, vendor_token = api_token_create(org=org, name="runner load")
    reviewer, _ = get_user_model().objects.get_or_create(
        username="load-reviewer", defaults={"is_staff": True, "email": "reviewer@localhost"}
    )
    text = (REPO / "docs" / "examples" / "simulated.yaml").read_text()
    config = parse_config(text, "application/yaml")
    from catalog.models import AIModel, HardwareSystem

    prepared = []
    for _ in range(runs):
        submission = Submission.objects.create(
            org=org,
            model=AIModel.objects.get(slug=config.model.id),
            hardware=HardwareSystem.objects.get(slug=config.hardware),
            config=config.model_dump(mode="json"),
            status=c.VALIDATED,
            is_simulated=True,
        )
        run, signature = run_prepare(submission=submission)  # nothing enqueued
        submission.status = c.QUEUED
        submission.save(update_fields=["status"])
        spec = signature.args[0]
        prepared.append(
            {
                "id": run.pk,
                "submission_id": submission.pk,
                "spec": spec,
                "token": run_token_for(run, spec["api"]["seed"]),
            }
        )
    last = results[-1]
    document = {
        "runs": prepared,
        "vendor_token": vendor_token,
        "reviewer": reviewer.username,
        "config_text": text,
        "paths": [
            "/",
            f"/models/{model.slug}/",
            f"/results/{last.pk}/",
            f"/api/v1/public/models/{model.slug}/",
            f"/api/v1/public/results/{last.pk}/",
        ],
    }
    (folder / "prepared.json").write_text(json.dumps(document))
    return document


def start_site(folder: Path, env: dict[str, str], port: int) -> subprocess.Popen:
    """gunicorn as `make demo` starts it (demo/management/commands/demo.py), with an access
    log of every response's status."""
    cmd = [
        sys.executable, "-m", "gunicorn", "config.wsgi", "-b", f"127.0.0.1:{port}",
        "-w", "2", "--threads", "4", "--timeout", "120",
        "--access-logfile", str(folder / "access.log"),
        "--access-logformat", "%(m)s %(U)s %(s)s %(D)s",
    ]  # fmt: skip
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        env=env,
        stdout=open(folder / "web.log", "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_site(url: str, process: subprocess.Popen, log: Path) -> None:
    """Until the site answers /health (or its process died: the log says why)."""
    while process.poll() is None:
        try:
            with urllib.request.urlopen(url + "/health?format=json", timeout=10):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the site exited with {process.returncode}:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


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


def one_profile(args: argparse.Namespace) -> dict[str, Any]:
    """Prepare the site, load it, count; run in its own process (one Django setup)."""
    folder = Path(args.folder)
    port = free_port()
    database = None
    if args.one == "postgresql":
        name = f"agentperf_runner_load_{uuid.uuid4().hex[:8]}"
        database = (args.database_url, name)
        url = postgres_database(args.database_url, True, name)
    else:
        url = None
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
            set_up_s = time.monotonic() - started
            run_ids = [r["id"] for r in prepared["runs"]]
            done = threading.Event()
            reads: Counter = Counter()
            submissions: Counter = Counter()
            publishes: Counter = Counter()
            threads = [
                threading.Thread(target=_reader, args=(base, prepared["paths"], done, reads))
                for _ in range(args.readers)
            ]
            threads += [
                threading.Thread(
                    target=_vendor,
                    args=(
                        base,
                        prepared["vendor_token"],
                        prepared["config_text"],
                        done,
                        submissions,
                    ),
                )
                for _ in range(args.vendors)
            ]
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
        finally:
            stop(site)
        disagree = disagreements(outcomes)
        access = access_counts(folder / "access.log")
        kinds = access["kinds"]
        fivexx = sum(n for s, n in access["statuses"].items() if s >= 500)
        return {
            "profile": args.one,
            "runs": len(run_ids),
            "killed": args.kill,
            "workers": args.workers,
            "heartbeats": kinds.get("heartbeat", 0),
            "uploads": kinds.get("uploads", 0) + kinds.get("blobs", 0),
            "trials": kinds.get("trials", 0),
            "completions": kinds.get("complete", 0),
            "publishes": publishes["published"],
            "publisher": dict(publishes),
            "reads": kinds.get("reads", 0),
            "submissions": submissions.get(201, 0) + submissions.get(200, 0),
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
            "outcomes": {str(k): v for k, v in outcomes.items()},
            "client_statuses": {
                "reads": dict(reads),
                "submissions": dict(submissions),
            },
            "set_up_s": round(set_up_s, 1),
            "load_s": round(load_s, 1),
        }
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


def main(argv: list[str] | None = None) -> int:
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
    args = parser.parse_args(argv)
    if args.kill > args.runs:
        parser.error("--kill cannot exceed --runs")
    if args.one:
        print(json.dumps(one_profile(args)), flush=True)
        return 0
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
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
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
    return 0 if all(r["5xx"] == 0 and r["disagree"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
