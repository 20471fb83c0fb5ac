"""Pipeline fixtures: the seeded catalog, a vendor token, short search settings pointed at
pytest-django's live server, and pool workers that have no database at all."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.llamacpp import free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs" / "examples"

# Short trials for a shared 2-core machine; client-health limits relaxed because other
# sessions' load makes event-loop lag here say nothing about the server under test.
FAST_SEARCH = {
    "warmup_s": 2.0,
    "duration_s": 6.0,
    "cap": 4,
    "max_trials": 6,
    "min_requests": 4,
    "tool_delay_scale": 0.3,
    "request_timeout_s": 60.0,
    "max_loop_lag_ms": 1000.0,
    "max_cpu_percent": 100.0,
}


@pytest.fixture
def catalog(db, settings) -> None:
    """The real catalog (transactional when the test also uses the live server)."""
    from catalog.services import catalog_seed

    settings.RUN_DATASET_SMALL_TRAJECTORIES = 3
    catalog_seed()


@pytest.fixture
def pipeline_settings(settings, live_server, catalog):
    """Run specs point the worker at the live server; trials are short."""
    settings.RUNNER_API_BASE_URL = live_server.url
    settings.RUN_DATASET_SMALL_TRAJECTORIES = 12
    settings.RUN_HEARTBEAT_INTERVAL_S = 2
    settings.RUN_SEARCH_OPTIONS_BY_POOL = {
        "simulated-realtime": dict(FAST_SEARCH),
        "simulated-virtual": dict(
            FAST_SEARCH, warmup_s=5.0, duration_s=20.0, cap=16, prime_cache=True
        ),
        "local-cpu": dict(
            FAST_SEARCH, duration_s=10.0, cap=2, max_trials=4, min_requests=3, shared_host=True
        ),
    }
    return settings


def closed_port() -> int:
    """A loopback port nothing listens on (bound and released)."""
    return free_port()


def no_database_env() -> dict[str, str]:
    """A pool worker's environment: the broker and queues, but a database URL on a closed
    port and no object-store credentials — any database or S3 access would fail."""
    from tests.support.workers import worker_env

    port = closed_port()
    env = worker_env(
        DATABASE_URL=f"postgresql://nobody@127.0.0.1:{port}/no_database",
        # Pool hosts have no result backend either: the runner API is how results come back.
        CELERY_RESULT_BACKEND="disabled",
    )
    for name in ("S3_ENDPOINT_URL", "S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY"):
        env.pop(name, None)
    return env


@pytest.fixture
def pool_worker_factory(tmp_path) -> Iterator:
    """Start real pool workers (own process groups) with no database; stopped at teardown."""
    from core.queues import pool_queue
    from tests.support.workers import start_worker

    started = []

    def start(pools: tuple[str, ...] = ("simulated", "local-cpu"), name: str = "pool"):
        log = tmp_path / f"{name}-{len(started)}.log"
        worker = start_worker([pool_queue(p) for p in pools], log, env=no_database_env())
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def vendor(catalog):
    """Org "Vendor A" with an API token (plaintext) for the vendor API."""
    from demo.synthetic import make_org
    from submissions.services.tokens import api_token_create

    org = make_org("Vendor A")
    _, token = api_token_create(org=org, name="ci")
    return org, token


def http(
    method: str,
    url: str,
    *,
    token: str | None = None,
    body: bytes | None = None,
    content_type: str = "application/json",
) -> tuple[int, Any]:
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if body is not None:
        headers["Content-Type"] = content_type
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else {}
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw) if raw else {}
        except ValueError:
            return exc.code, {"raw": raw[:500].decode(errors="replace")}


def submit(base_url: str, token: str, config_text: str) -> dict:
    status, body = http(
        "POST",
        f"{base_url}/api/v1/submissions/",
        token=token,
        body=config_text.encode(),
        content_type="application/yaml",
    )
    assert status == 201, body
    return body


def wait_for_status(
    base_url: str, token: str, submission_id: int, states: set[str], *, timeout_s: float = 600
) -> dict:
    """Poll the vendor API until the submission reaches one of `states`."""
    deadline = time.monotonic() + timeout_s
    body: dict = {}
    while time.monotonic() < deadline:
        status, body = http("GET", f"{base_url}/api/v1/submissions/{submission_id}/", token=token)
        assert status == 200, body
        if body["status"] in states:
            return body
        time.sleep(1.0)
    raise AssertionError(f"submission {submission_id} still {body.get('status')!r}: {body}")
