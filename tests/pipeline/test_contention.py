"""Contention on the runner API (docs/pipeline.md "Contention"): a lock held past the
database's lock timeout is a 503 with Retry-After, never a 500; the worker waits that long
and retries; every write it retries counts once; a completion stopped half-way resumes when
sent again or is finished by the reaper, so the worker and the site agree on how it ended.

The locks are real: a write transaction held on the SQLite file of a separate web process
(the embedded profile, benchmarks/runner_load.py's site), a table lock held from another
PostgreSQL connection. The lost answers are real too: a proxy in front of the live server
forwards each request and drops the first answer on chosen paths.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import http.client
import http.server
import json
import sqlite3
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core.files.storage import storages
from django.db import connection
from django.utils import timezone

from agentperf import contract
from agentperf.engine.trial import TierVerdict
from demo.synthetic import trial_metrics
from runner.worker import api_client
from runner.worker.api_client import RunnerApi, RunnerApiError, RunSuperseded
from runner.worker.reporter import ApiReporter
from runs.models import BenchmarkRun, Trial
from submissions import constants as c
from submissions.models import Artifact, AuditEvent
from tests.pipeline.builders import completion, prepared_run, progress, runner_info

REPO = Path(__file__).resolve().parents[2]
postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="a PostgreSQL lock (the services profile)"
)


def transitions(submission_id: int) -> Counter:
    events = AuditEvent.objects.filter(
        object_type="submissions.submission", object_id=str(submission_id)
    )
    return Counter(f"{e.from_state}>{e.to_state}" for e in events)


def records_blob(lines: int = 4) -> bytes:
    body = b"".join(b'{"request_id": "r%d"}\n' % i for i in range(lines))
    return gzip.compress(body, mtime=0)


def trial_report(run: BenchmarkRun, ref: contract.RawRecordsRef) -> contract.TrialReport:
    """Trial 0 as the worker reports it, its raw records the uploaded ``ref``."""
    names = [t["name"] for t in run.run_spec["tiers"]]
    return contract.TrialReport(
        index=0,
        concurrency=1,
        phase="ramp",
        metrics=contract.TrialMetrics.model_validate(
            trial_metrics(speed=50.0, throughput=100.0, ttft_p75=1.0, accelerators=1, requests=3)
        ),
        verdicts={
            n: contract.TierVerdict.of(TierVerdict(passed=i == 0)) for i, n in enumerate(names)
        },
        telemetry=contract.TrialTelemetry(measured=False, reason="not measured: test"),
        raw_records=ref,
    )


def client_for(run: BenchmarkRun, token: str, base: str, **options) -> RunnerApi:
    return RunnerApi(f"{base}/api/v1/runner/runs/{run.pk}/", token, **options)


def uploaded_trial(reporter: ApiReporter, run: BenchmarkRun) -> None:
    """Upload trial 0's raw records through the grant, then report the trial."""
    blob = records_blob()
    request = contract.UploadRequest(
        kind="raw_records",
        sha256=hashlib.sha256(blob).hexdigest(),
        size=len(blob),
        trial_index=0,
        count=4,
    )
    key = reporter.upload(request, blob)
    ref = contract.RawRecordsRef(key=key, sha256=request.sha256, size=len(blob), count=4)
    reporter.trial(trial_report(run, ref))


@pytest.fixture
def busy_lock_timeout(monkeypatch):
    """New PostgreSQL connections (the live server's, one per request) give up a lock wait
    after 300 ms instead of DATABASE_LOCK_TIMEOUT_S: the same error, sooner."""
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "options", "-c lock_timeout=300")


class _TableLock:
    """An ACCESS EXCLUSIVE lock on one table, held from another PostgreSQL connection."""

    def __init__(self, table: str) -> None:
        import psycopg

        db = connection.settings_dict
        self.conn = psycopg.connect(
            dbname=db["NAME"],
            user=db["USER"] or None,
            password=db["PASSWORD"] or None,
            host=db["HOST"] or None,
            port=db["PORT"] or None,
        )
        self.conn.execute(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE')

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


# --- the embedded profile: a real SQLite write lock ----------------------------------------


@pytest.fixture
def sqlite_site(tmp_path):
    """benchmarks/runner_load.py's site on the embedded profile in its own gunicorn, its
    lock timeout 1 s; one prepared run. Yields (base URL, database file, prepared run)."""
    from benchmarks.runner_load_site import site_env, start_site, stop, wait_site

    folder = tmp_path / "site"
    folder.mkdir()
    made = subprocess.run(
        [sys.executable, "-m", "benchmarks.runner_load", "--one", "sqlite", "--folder",
         str(folder), "--runs", "1", "--kill", "0", "--prepare-only"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    port = json.loads(made.stdout.strip().splitlines()[-1])["port"]
    env = site_env(folder, "sqlite", port)
    env["DATABASE_LOCK_TIMEOUT_S"] = "1"
    site = start_site(folder, env, port)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_site(base, site, folder / "web.log")
        prepared = json.loads((folder / "prepared.json").read_text())
        yield base, folder / "var" / "db.sqlite3", prepared["runs"][0]
    finally:
        stop(site)


def test_a_write_held_up_past_the_busy_timeout_on_sqlite_is_a_503_the_worker_retries(
    sqlite_site, monkeypatch
):
    base, database, run = sqlite_site
    api = RunnerApi(f"{base}/api/v1/runner/runs/{run['id']}/", run["token"], retries=0)
    ApiReporter(api).start(contract.StartReport.model_validate({"runner_info": runner_info()}))
    holder = sqlite3.connect(database, isolation_level=None)
    assert holder.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    holder.execute("BEGIN IMMEDIATE")  # the write lock, as a long write transaction holds it
    beat = progress(trial=1)
    with pytest.raises(RunnerApiError) as refused:
        api.call("POST", "heartbeat", beat)
    assert refused.value.status == 503
    assert refused.value.body["error"]["code"] == "busy"
    request = urllib.request.Request(
        f"{base}/api/v1/runner/runs/{run['id']}/heartbeat",
        data=json.dumps(beat).encode(),
        method="POST",
        headers={**api._headers(), "Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(request, timeout=60)
    assert answer.value.code == 503
    assert answer.value.headers["Retry-After"] == "2"  # DATABASE_BUSY_RETRY_AFTER_S
    assert "no-store" in answer.value.headers["Cache-Control"]
    # The worker's client waits the answer's Retry-After (not its own 0 s backoff) and
    # retries; the lock is released during that wait, as the other writer commits.
    waits: list[float] = []

    def wait(seconds: float) -> None:
        waits.append(seconds)
        holder.execute("ROLLBACK")

    monkeypatch.setattr(api_client, "time", SimpleNamespace(sleep=wait))
    patient = RunnerApi(api.base_url, api.token, retries=2, backoff_s=0.0)
    patient.attempt = api.attempt
    assert patient.call("POST", "heartbeat", beat) == {"cancel": False}
    assert waits == [2.0]
    stored = holder.execute("SELECT progress FROM runs_benchmarkrun WHERE id = ?", (run["id"],))
    assert json.loads(stored.fetchone()[0])["trial"] == 1
    holder.close()


# --- PostgreSQL: a real table lock, a completion stopped half-way ---------------------------


def _started(catalog, live_server, settings):
    run, token = prepared_run()
    settings.RUNNER_API_BASE_URL = live_server.url
    reporter = ApiReporter(client_for(run, token, live_server.url, retries=0))
    reporter.start(contract.StartReport.model_validate({"runner_info": runner_info()}))
    uploaded_trial(reporter, run)
    run.refresh_from_db()
    return run, token, reporter


def _stopped_at_verification(run, reporter) -> dict:
    """POST complete while another connection locks the verification reports: the
    completion is stored (verifying), its verification's write waits, gives up, and the
    answer is 503. Returns the completion sent."""
    done = completion(run)
    lock = _TableLock("runs_verificationreport")
    try:
        with pytest.raises(RunnerApiError) as refused:
            reporter.api.call("POST", "complete", done)
    finally:
        lock.release()
    assert refused.value.status == 503 and refused.value.body["error"]["code"] == "busy"
    run.refresh_from_db()
    assert (run.status, run.submission.status) == ("running", c.VERIFYING)
    return done


@postgresql_only
def test_a_completion_stopped_by_a_lock_is_a_503_and_resumes_when_sent_again(
    catalog, live_server, settings, busy_lock_timeout
):
    run, _, reporter = _started(catalog, live_server, settings)
    done = _stopped_at_verification(run, reporter)
    assert reporter.api.call("POST", "complete", done) == {"status": c.IN_REVIEW}
    run.refresh_from_db()
    assert (run.status, run.submission.status) == ("done", c.IN_REVIEW)
    assert run.verification.checks
    moves = transitions(run.submission_id)
    assert moves["running>verifying"] == 1 and moves["verifying>in_review"] == 1


@postgresql_only
def test_the_reaper_verifies_a_run_whose_worker_died_after_its_completion_was_stored(
    catalog, live_server, settings, busy_lock_timeout
):
    from runs.services import reap_stale_runs

    run, token, reporter = _started(catalog, live_server, settings)
    _stopped_at_verification(run, reporter)  # and the worker is killed: no retry
    later = timezone.now() + dt.timedelta(seconds=settings.RUN_HEARTBEAT_STALE_S + 1)
    assert reap_stale_runs(now=later) == [(run.pk, "verified")]
    run.refresh_from_db()
    assert (run.status, run.submission.status) == ("done", c.IN_REVIEW)
    assert transitions(run.submission_id)["verifying>in_review"] == 1
    # the message redelivered to another worker: it learns how the run ended
    again = client_for(run, token, live_server.url, retries=0)
    with pytest.raises(RunSuperseded) as ended:
        again.call("POST", "start", {"runner_info": runner_info()})
    assert (ended.value.status, ended.value.run_status) == (401, "done")


def test_a_repeated_completion_is_answered_as_the_first_and_changes_nothing(
    catalog, live_server, settings
):
    run, _, reporter = _started(catalog, live_server, settings)
    done = completion(run)
    first = reporter.api.call("POST", "complete", done)
    run.refresh_from_db()
    finished_at = run.finished_at
    second = reporter.api.call("POST", "complete", done)
    assert first == second == {"status": c.IN_REVIEW}
    run.refresh_from_db()
    assert (run.status, run.finished_at) == ("done", finished_at)
    moves = transitions(run.submission_id)
    assert moves["running>verifying"] == 1 and moves["verifying>in_review"] == 1
    other = dict(done, search_summary=dict(done["search_summary"], flags=["changed"]))
    with pytest.raises(RunSuperseded) as refused:
        reporter.api.call("POST", "complete", other)
    assert (refused.value.status, refused.value.run_status) == (401, "done")


# --- lost answers: the worker's retries count once ------------------------------------------


class _LosingProxy(http.server.ThreadingHTTPServer):
    """Forwards every request to ``upstream``; the first answer on each path whose last
    segment is in ``lose`` is dropped after the upstream handled it (the connection closes
    with no answer, as when a network or a process between them fails)."""

    daemon_threads = True

    def __init__(self, upstream: str, lose: set[str]) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.lose = lose
        self.lost: list[str] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Forward)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(http.server.BaseHTTPRequestHandler):
    server: _LosingProxy

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        upstream = http.client.HTTPConnection(self.server.upstream, timeout=60)
        upstream.request(self.command, self.path, body, headers)
        answer = upstream.getresponse()
        content = answer.read()
        segment = self.path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
        with self.server.lock:
            lose = segment in self.server.lose and segment not in self.server.lost
            if lose:
                self.server.lost.append(segment)
        if lose:
            self.close_connection = True
            return
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    do_GET = do_POST = do_PUT = _forward

    def log_message(self, *args) -> None:
        pass


def test_the_workers_retries_after_lost_answers_count_each_write_once(
    catalog, live_server, settings
):
    run, token = prepared_run()
    proxy = _LosingProxy(live_server.url, {"heartbeat", "uploads", "blobs", "trials", "complete"})
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    settings.RUNNER_API_BASE_URL = proxy.url  # upload grants name the proxy too
    try:
        reporter = ApiReporter(client_for(run, token, proxy.url, retries=3, backoff_s=0.0))
        reporter.start(contract.StartReport.model_validate({"runner_info": runner_info()}))
        assert reporter.heartbeat(contract.Heartbeat.model_validate(progress(trial=1))) is False
        uploaded_trial(reporter, run)
        reporter.complete(contract.CompletionReport.model_validate(completion(run)))
    finally:
        proxy.shutdown()
    # with S3 the upload grant is a presigned PUT to the object store, past the proxy
    on_s3 = hasattr(storages["artifacts"], "bucket_name")
    lost = {"heartbeat", "uploads", "trials", "complete"} | (set() if on_s3 else {"blobs"})
    assert sorted(proxy.lost) == sorted(lost)
    run.refresh_from_db()
    assert (run.status, run.attempt, run.submission.status) == ("done", 1, c.IN_REVIEW)
    assert run.progress["phase"] == "done"
    assert Trial.objects.filter(run=run).count() == 1
    assert Artifact.objects.filter(run=run, kind=Artifact.KIND_RAW_RECORDS).count() == 1
    moves = transitions(run.submission_id)
    assert moves == Counter({"queued>running": 1, "running>verifying": 1, "verifying>in_review": 1})
