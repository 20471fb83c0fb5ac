"""The runner API's JSON bodies get the same limits as the vendor API's (docs/security.md
"Input limits"): a deep or non-finite body from a run's own token is a 400 naming the
field, and nothing is recorded."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from runs.models import Trial
from tests.pipeline.builders import prepared_run, runner_info

pytestmark = pytest.mark.django_db

DEEP = 50_000


@pytest.fixture
def started(catalog, cast):
    run, token = prepared_run(cast.org_a)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    answer = client.post(
        f"/api/v1/runner/runs/{run.pk}/start", {"runner_info": runner_info()}, format="json"
    )
    assert answer.status_code == 200, answer.json()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_X_RUN_ATTEMPT=str(answer.json()["attempt"])
    )
    return run, client


def test_a_deep_trial_body_is_refused_before_parsing(started):
    run, client = started
    body = '{"index": 0, "summary": ' + "[" * DEEP + "]" * DEEP + "}"
    response = client.post(
        f"/api/v1/runner/runs/{run.pk}/trials", body, content_type="application/json"
    )
    assert response.status_code == 400, response.content[:300]
    error = response.json()["error"]
    assert error["code"] == "too_deep" and "summary" in error["fields"]
    assert not Trial.objects.filter(run=run).exists()


def test_a_non_finite_number_in_a_heartbeat_is_refused_naming_the_field(started):
    run, client = started
    response = client.post(
        f"/api/v1/runner/runs/{run.pk}/heartbeat",
        '{"progress": {"concurrency": Infinity}}',
        content_type="application/json",
    )
    assert response.status_code == 400, response.content[:300]
    assert "progress.concurrency" in response.json()["error"]["fields"]


def test_model_output_with_control_characters_is_accepted_as_evidence_but_nul_is_not(started):
    """Canary answers and top-k tokens are what the model said: any character but NUL."""
    import json

    run, client = started
    odd = "\x1b[0m\x07\x0bgarbage\x7f"
    checks = [
        {
            "name": "canary_outputs",
            "status": "pass",
            "summary": "s",
            "fatal": False,
            "evidence": {"canaries": [{"id": "x", "output": odd, "ok": True}]},
        }
    ]
    url = f"/api/v1/runner/runs/{run.pk}/qualification"
    ok = client.post(
        url,
        json.dumps({"checks": checks, "runner_info": runner_info()}),
        content_type="application/json",
    )
    assert ok.status_code == 200, ok.content[:300]
    run.refresh_from_db()
    assert run.qualification[0]["evidence"]["canaries"][0]["output"] == odd
    checks[0]["evidence"]["canaries"][0]["output"] = "a\x00b"
    refused = client.post(
        url,
        json.dumps({"checks": checks, "runner_info": runner_info()}),
        content_type="application/json",
    )
    assert refused.status_code == 400
    assert "checks.0.evidence.canaries.0.output" in refused.json()["error"]["fields"]


def test_a_lone_surrogate_in_model_output_is_a_400_not_a_server_error(started):
    """A JSON `\\ud800` escape decodes to a string no database can store (no UTF-8 form)."""
    run, client = started
    body = (
        '{"checks": [{"name": "canary_outputs", "status": "pass", "summary": "s", '
        '"fatal": false, "evidence": {"output": "a\\ud800b"}}], "runner_info": '
        + json.dumps(runner_info())
        + "}"
    )
    response = client.post(
        f"/api/v1/runner/runs/{run.pk}/qualification", body, content_type="application/json"
    )
    assert response.status_code == 400, response.content[:300]
    assert "checks.0.evidence.output" in response.json()["error"]["fields"]


@pytest.mark.parametrize("mib", [5, 9])
def test_a_body_past_the_limit_is_a_413_naming_the_limit_and_records_nothing(started, mib):
    """The hostile finding: runner bodies of 3–5 MiB got a 400 that named no field (Django's
    2.5 MiB cap, below the API's 4 MiB); past the one limit, a 413 in the error shape."""
    run, client = started
    padding = "x" * (mib * 1024 * 1024)
    body = json.dumps({"index": 0, "summary": {"note": padding}})
    response = client.post(
        f"/api/v1/runner/runs/{run.pk}/trials", body, content_type="application/json"
    )
    error = response.json()["error"]
    assert response.status_code == 413, error
    assert error["code"] == "too_large" and error["fields"], error
    assert not Trial.objects.filter(run=run).exists()


def test_a_body_under_the_limit_is_read_and_judged_by_its_fields(started):
    run, client = started
    body = json.dumps({"index": 0, "summary": {"note": "x" * (3 * 1024 * 1024)}})
    response = client.post(
        f"/api/v1/runner/runs/{run.pk}/trials", body, content_type="application/json"
    )
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]["fields"]  # names what does not fit, not "malformed"
    assert not Trial.objects.filter(run=run).exists()
