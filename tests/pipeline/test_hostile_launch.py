"""The hostile vendor of the security review, end to end with a real pool worker: a config
whose launch runs a shell-like probe of the pool host. It waits for a reviewer; once a
(careless) reviewer approves it, it runs in the sandbox, and nothing of the host reaches the
vendor's API responses (docs/security.md "Vendor commands", "Sandbox")."""

from __future__ import annotations

import json
import os
import sys

import pytest
import yaml

from review.services import review_approve_launch
from runs.models import BenchmarkRun
from submissions.models import Submission
from tests.pipeline.conftest import EXAMPLES, http, no_database_env, submit, wait_for_status
from tests.support.workers import REPO

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PROBE = (
    "import os, sys\n"
    "print('uid=%d' % os.getuid())\n"
    "print('env=' + ','.join(sorted(os.environ)))\n"
    "print('cwd=' + os.getcwd())\n"
    "for path in sys.argv[1:]:\n"
    "    try:\n"
    "        print('read %s: %r' % (path, open(path, 'rb').read(40)))\n"
    "    except OSError as exc:\n"
    "        print('read %s: %s' % (path, type(exc).__name__))\n"
    "sys.exit(3)\n"
)


def test_a_hostile_launch_waits_for_review_then_runs_contained_and_leaks_nothing(
    pipeline_settings, live_server, vendor, tmp_path, cast, monkeypatch
):
    from core.queues import pool_queue
    from tests.support.workers import start_worker

    _, token = vendor
    doc = yaml.safe_load((EXAMPLES / "process.yaml").read_text())
    # a file of the runner host's (world-readable even) and a system file; the vendor names
    # these paths itself, so they may appear in its own config, but never their contents
    targets = [str(tmp_path / "runner-secret.txt"), "/etc/shadow"]
    (tmp_path / "runner-secret.txt").write_text("PRIVATE-TEST-SET-ROW")
    doc["launch"]["command"] = "python"
    doc["launch"]["args"] = ["-c", PROBE, *targets]
    env = no_database_env()
    env["HOST_ONLY_SECRET"] = "host-only-value-0123456789"
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    worker = start_worker([pool_queue("local-cpu")], tmp_path / "hostile-worker.log", env=env)
    try:
        created = submit(live_server.url, token, yaml.safe_dump(doc))
        assert created["status"] in ("validated", "awaiting_approval"), created
        body = wait_for_status(live_server.url, token, created["id"], {"awaiting_approval"})
        assert not BenchmarkRun.objects.filter(submission_id=created["id"]).exists()
        review_approve_launch(
            submission=Submission.objects.get(pk=created["id"]),
            actor=cast.rita,
            reason="approved without reading it (the sandbox must still hold)",
        )
        body = wait_for_status(live_server.url, token, created["id"], {"failed", "in_review"})
    finally:
        worker.stop()
    assert body["status"] == "failed", body
    run = BenchmarkRun.objects.get(submission_id=created["id"])
    responses = [json.dumps(body)]
    for path in (
        f"/api/v1/submissions/{created['id']}/runs/",
        f"/api/v1/runs/{run.pk}/",
        f"/api/v1/runs/{run.pk}/verification/",
    ):
        status, payload = http("GET", live_server.url + path, token=token)
        assert status in (200, 404), (path, status, payload)
        responses.append(json.dumps(payload))
    seen = "\n".join(responses)
    assert "uid=65534" in body["status_reason"]  # it ran, as the unprivileged user
    assert "uid=0" not in seen
    assert "PRIVATE-TEST-SET-ROW" not in seen and "root:" not in seen
    assert "HOST_ONLY_SECRET" not in seen and "host-only-value" not in seen
    assert "DATABASE_URL" not in seen and "CELERY" not in seen
    # the runner's own places: its home, its code, the run's working folder
    assert os.path.expanduser("~") not in seen
    assert str(REPO) not in seen and "agentperf-run-" not in seen
