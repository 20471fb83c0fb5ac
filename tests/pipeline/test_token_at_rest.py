"""No run token at rest (docs/security.md "Run tokens and upload grants"): a run goes
through the embedded profile's SQLite broker to a real pool worker (no database) and the
live runner API; afterwards the broker's tables — which keep consumed messages — and every
table of the database hold the token's seed and hash at most, never the token."""

from __future__ import annotations

import base64
import json
import sqlite3
import time

import pytest
from django.db import connection
from kombu import Connection

from core.queues import pool_queue
from runs.dispatch import run_signature, run_token_for, run_token_mint
from runs.models import BenchmarkRun
from submissions import constants as c
from tests.pipeline.builders import prepared_run
from tests.pipeline.conftest import no_database_env
from tests.support.workers import start_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _broker_texts(path) -> list[str]:
    """Every text in the broker's tables, message bodies decoded as kombu encodes them."""
    texts: list[str] = []
    db = sqlite3.connect(path)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):
                for value in row:
                    text = value.decode(errors="replace") if isinstance(value, bytes) else value
                    if isinstance(text, str):
                        texts.append(text)
                        texts.extend(_decoded(text))
    finally:
        db.close()
    return texts


def _decoded(payload: str) -> list[str]:
    try:
        message = json.loads(payload)
    except ValueError:
        return []
    if not isinstance(message, dict) or "body" not in message:
        return []
    body = message["body"]
    if (message.get("properties") or {}).get("body_encoding") == "base64":
        body = base64.b64decode(body).decode(errors="replace")
    return [body]


def _database_texts() -> list[str]:
    texts = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f'SELECT row_to_json(t)::text FROM "{table}" t')
            texts.extend(row[0] for row in cursor.fetchall())
    return texts


def test_after_a_run_neither_the_broker_nor_the_database_holds_its_token(
    pipeline_settings, live_server, cast, tmp_path
):
    # One concurrency (N = 1 and its confirmation) instead of the ramp 1, 2, 4: every trial
    # goes through the same runner API calls with the same token, and nothing here counts
    # trials; the search's steps are tested in test_e2e_simulated.py.
    pipeline_settings.RUN_SEARCH_OPTIONS_BY_POOL["simulated-realtime"]["cap"] = 1
    broker_path = tmp_path / "celery-broker.sqlite"
    broker_url = f"sqla+sqlite:///{broker_path}"
    env = no_database_env()
    env["CELERY_BROKER_URL"] = broker_url
    worker = start_worker([pool_queue("simulated")], tmp_path / "pool.log", env=env)
    try:
        run, _ = prepared_run(cast.org_a)
        # dispatch's own message for this run (a fresh seed, as a requeue mints it), sent
        # through the SQLite broker the worker consumes
        seed, token_hash = run_token_mint(run)
        BenchmarkRun.objects.filter(pk=run.pk).update(token_hash=token_hash)
        run.refresh_from_db()
        with Connection(broker_url) as conn:
            run_signature(run, seed).apply_async(producer=conn.Producer())
        deadline = time.monotonic() + 600
        while BenchmarkRun.objects.get(pk=run.pk).status not in BenchmarkRun.FINAL_STATES:
            assert time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.5)
    finally:
        worker.stop()
    run.refresh_from_db()
    assert run.status == BenchmarkRun.STATUS_DONE, (run.error, worker.log()[-3000:])
    assert run.submission.status == c.IN_REVIEW
    token = run_token_for(run, seed)

    broker = _broker_texts(broker_path)
    assert any(seed in text for text in broker), "the consumed message is in the broker"
    assert not [text for text in broker if token in text]
    assert not [text for text in broker if '"token"' in text]

    database = _database_texts()
    assert any(run.token_hash in text for text in database)
    assert not [text for text in database if token in text]
    assert not [text for text in database if seed in text]
