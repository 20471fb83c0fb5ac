"""benchmarks/runner_load.py's smallest form, on both database profiles: runs under load
(heartbeats, uploads, trials, completions, one worker killed mid-completion and delivered
again, publishes, public reads, vendor submissions at the same time) answer no 5xx, and
every run ends the same on the worker and on the site (docs/pipeline.md "Contention",
docs/benchmarks.md "Runner API under load").

Each profile is a real site in its own gunicorn: SQLite in a temporary folder (the embedded
profile), or a fresh database on this session's PostgreSQL server (dropped after).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

REPO = Path(__file__).resolve().parents[2]
RUNS, KILLED = 4, 1


def _server_url() -> str:
    db = connection.settings_dict
    user = db["USER"] or "postgres"
    auth = f"{user}:{db['PASSWORD']}" if db["PASSWORD"] else user
    return f"postgresql://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/postgres"


@pytest.mark.slow
@pytest.mark.parametrize(
    "profile",
    [
        "sqlite",
        pytest.param(
            "postgresql",
            marks=pytest.mark.skipif(
                connection.vendor != "postgresql", reason="the services profile's PostgreSQL"
            ),
        ),
    ],
)
def test_runs_under_load_answer_no_5xx_and_end_the_same_on_the_worker_and_the_site(profile):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.runner_load", "--profile", profile,
         "--runs", str(RUNS), "--kill", str(KILLED), "--workers", "2", "--readers", "2",
         "--vendors", "1", "--database-url", _server_url(), "--json"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["profile"] == profile
    assert row["5xx"] == 0, row["errors"]
    assert row["disagree"] == 0, row["disagreements"]
    # the load happened: every run reported through the API and was published, beside
    # public reads and vendor submissions
    assert row["publishes"] == RUNS
    assert row["completions"] >= RUNS and row["trials"] >= RUNS and row["heartbeats"] >= RUNS
    assert row["uploads"] >= RUNS and row["reads"] > 0 and row["submissions"] > 0
    outcomes = list(row["outcomes"].values())
    killed = [o for o in outcomes if o[0]["status"] == "killed"]
    assert len(killed) == KILLED and all(o[0]["exitcode"] == -9 for o in killed)
    # each run's last delivery says how it ended, and that is what the site holds
    assert all(o[-1]["run_status"] in ("done", None) for o in outcomes)
    assert sum(o[-1]["run_status"] == "done" for o in outcomes) >= RUNS - KILLED
