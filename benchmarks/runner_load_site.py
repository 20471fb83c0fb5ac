"""The runner-load benchmark's throwaway site (benchmarks/runner_load.py, docs/benchmarks.md
"Runner API under load"): its environment on either database profile, a fresh PostgreSQL
database where asked, the site's data (migrated, seeded, a few results published, the runs
made by dispatch's own `run_prepare`), and gunicorn as `make demo` serves it.

tests/pipeline/test_contention.py starts the same site for its SQLite lock test.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
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


def free_port() -> int:
    """A free loopback port for the site."""
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


def _make_runs(org: Any, config: Any, runs: int) -> list[dict[str, Any]]:
    """`runs` submissions of the simulated example, each with a run made by dispatch's own
    `run_prepare` (nothing enqueued) and left queued: id, submission, task spec and token."""
    from catalog.models import AIModel, HardwareSystem
    from runs.dispatch import run_prepare, run_token_for
    from submissions import constants as c
    from submissions.models import Submission

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
    return prepared


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
    prepared = _make_runs(org, config, runs)
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
        sys.executable, "-m", "gunicorn", "config.wsgi", "-c", "config/gunicorn.py",
        "-b", f"127.0.0.1:{port}",
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
    """Stop the site's process group: SIGTERM, then SIGKILL after 30 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
