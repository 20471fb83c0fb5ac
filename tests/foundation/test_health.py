import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.django_db(transaction=True)
def test_health_reports_database_broker_and_storage_ok_with_a_worker(client, celery_worker):
    response = client.get("/health?format=json")
    body = response.json()
    assert response.status_code == 200, body
    assert body["ok"] is True
    assert body["checks"]["database"]["engine"] == "postgresql"
    assert body["checks"]["broker"]["transport"] == "amqp"
    assert body["checks"]["broker"]["worker"]
    assert body["checks"]["storage"]["backend"] == "s3"


@pytest.mark.django_db(transaction=True)
def test_health_page_renders_each_part_as_html(client, celery_worker):
    response = client.get("/health")
    html = response.content.decode()
    assert response.status_code == 200
    for part in ("database", "broker", "storage"):
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
        "r = Client().get('/health', HTTP_ACCEPT='application/json'); "
        "print(r.status_code, json.dumps(r.json()))"
    )
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=REPO, env=env, check=True, timeout=300
    )
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.monotonic() - started
    status, _, payload = proc.stdout.strip().splitlines()[-1].partition(" ")
    body = json.loads(payload)
    assert status == "503", proc.stderr
    assert body["checks"]["broker"]["ok"] is False
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["storage"]["ok"] is True
    # The check has a deadline; this only proves it returned instead of hanging.
    assert elapsed < 110


@pytest.mark.django_db
def test_health_reports_a_broker_without_a_worker_as_down(client):
    response = client.get("/health?format=json")
    body = response.json()
    assert response.status_code == 503
    assert body["checks"]["broker"]["ok"] is False
    # Either the result wait or the check's own deadline ends it, whichever comes first.
    assert re.search(r"Timeout|timed out|no answer within", body["checks"]["broker"]["error"])
