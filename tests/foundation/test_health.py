import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery.signals import before_task_publish
from django.core.cache import cache

from core.health import CACHE_KEY, health_queue
from tests.support.tasks import BLOCK_WORKER
from tests.support.workers import start_worker

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh_report():
    """The report is cached for HEALTH_CACHE_S seconds; each test starts without one."""
    cache.delete(CACHE_KEY)
    yield
    cache.delete(CACHE_KEY)


@pytest.mark.django_db
def test_health_reports_database_cache_broker_and_storage_ok(client):
    response = client.get("/health?format=json")
    body = response.json()
    assert response.status_code == 200, body
    assert body["ok"] is True
    assert body["checks"]["database"]["engine"] == "postgresql"
    assert body["checks"]["cache"]["backend"] == "PrefixedRedisCache"
    assert body["checks"]["broker"]["transport"] == "amqp"
    assert body["checks"]["broker"]["queue"] == health_queue()
    assert body["checks"]["broker"]["queue_messages"] == 0
    assert body["checks"]["storage"]["backend"] == "s3"


@pytest.mark.django_db
def test_health_page_renders_each_part_as_html(client):
    response = client.get("/health")
    html = response.content.decode()
    assert response.status_code == 200
    for part in ("database", "cache", "broker", "storage"):
        assert f'<th scope="row">{part}</th>' in html


def test_health_reports_a_stopped_broker_as_down_instead_of_hanging(tmp_path):
    """A web process whose broker is stopped (nothing listens on port 1) answers 503."""
    env = {
        **os.environ,
        "CELERY_BROKER_URL": "amqp://guest:guest@127.0.0.1:1//",
        "AGENTPERF_VAR_DIR": str(tmp_path),
    }
    env.pop("DATABASE_URL", None)  # its own SQLite file: this test is about the broker
    code = (
        "import json; from django.test import Client; "
        "r = Client(HTTP_HOST='localhost').get('/health', HTTP_ACCEPT='application/json'); "
        "print(r.status_code, json.dumps(r.json()))"
    )
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=REPO, env=env, check=True, timeout=300
    )
    # the check has a deadline: a hang ends this process's run at its timeout, a failure
    proc = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    status, _, payload = proc.stdout.strip().splitlines()[-1].partition(" ")
    body = json.loads(payload)
    assert status == "503", proc.stderr
    assert body["checks"]["broker"]["ok"] is False
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["storage"]["ok"] is True


def _web_queue_messages() -> int:
    from config.celery import app
    from core.queues import web_queue

    with app.connection_for_write() as conn:
        channel = conn.channel()
        try:
            name = web_queue()
            return int(channel.queue_declare(queue=name, durable=True, auto_delete=False)[1])
        finally:
            channel.close()


@pytest.mark.django_db
def test_anonymous_health_calls_enqueue_nothing_and_share_one_report(client):
    """No worker runs here: a task sent by /health would stay on the queue, counted."""
    sent: list[str] = []

    def count(sender=None, **_):
        sent.append(str(sender))

    before = _web_queue_messages()
    before_task_publish.connect(count)
    try:
        answers = [client.get("/health?format=json") for _ in range(25)]
    finally:
        before_task_publish.disconnect(count)
    assert [a.status_code for a in answers] == [200] * 25
    assert sent == []
    assert _web_queue_messages() == before
    assert {a.json()["checks"]["broker"]["queue_messages"] for a in answers} == {0}
    # one set of checks served them all (within HEALTH_CACHE_S of each other)
    assert len({a.json()["checked_at"] for a in answers}) == 1


@pytest.mark.django_db(transaction=True)
def test_health_answers_200_while_a_run_occupies_the_only_worker(client, tmp_path):
    from config.celery import app
    from core.queues import web_queue

    worker = start_worker([web_queue()], tmp_path / "worker.log", include=("tests.support.tasks",))
    started, release = tmp_path / "started", tmp_path / "release"
    try:
        app.send_task(BLOCK_WORKER, args=[str(started), str(release)], queue=web_queue())
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started.exists(), worker.log()[-2000:]
        response = client.get("/health?format=json")
        body = response.json()
        assert response.status_code == 200, body
        assert body["checks"]["broker"]["ok"] is True
        assert body["checks"]["broker"]["web_consumers"] == 1  # busy, and still consuming
    finally:
        release.touch()
        worker.stop()
