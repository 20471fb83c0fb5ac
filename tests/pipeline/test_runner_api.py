"""The runner API: a run token opens its own run and nothing else; ingest is idempotent
and fenced by attempt; raw records must be in storage before anything is recorded."""

from __future__ import annotations

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from runs.models import BenchmarkRun, Trial
from submissions import constants as c
from submissions.services.tokens import api_token_create
from tests.pipeline.builders import (
    completion,
    prepared_run,
    progress,
    runner_info,
    stored_records,
    trial_payload,
)

pytestmark = pytest.mark.django_db

ENDPOINTS = [
    ("get", ""),
    ("post", "start"),
    ("post", "heartbeat"),
    ("post", "qualification"),
    ("post", "uploads"),
    ("put", "blobs"),
    ("get", "trials"),
    ("post", "trials"),
    ("post", "complete"),
    ("post", "fail"),
]


@pytest.fixture
def two_runs(catalog, cast):
    run_a, token_a = prepared_run(cast.org_a)
    run_b, token_b = prepared_run(cast.org_b)
    return run_a, token_a, run_b, token_b


def _call(client: APIClient, method: str, run: BenchmarkRun, path: str, **headers):
    url = f"/api/v1/runner/runs/{run.pk}/{path}"
    return getattr(client, method)(url, {}, format="json", headers=headers)


def test_another_runs_token_is_refused_on_every_endpoint(two_runs):
    run_a, _, _, token_b = two_runs
    for method, path in ENDPOINTS:
        response = _call(APIClient(), method, run_a, path, Authorization=f"Bearer {token_b}")
        assert response.status_code == 403, (method, path)
        assert response.json()["error"]["message"] == "this token belongs to another run"


def test_vendor_token_of_the_owning_org_is_refused_on_every_endpoint(two_runs, cast):
    run_a = two_runs[0]
    _, vendor_token = api_token_create(org=cast.org_a, name="alice")
    for method, path in ENDPOINTS:
        response = _call(APIClient(), method, run_a, path, Authorization=f"Bearer {vendor_token}")
        assert response.status_code == 401, (method, path)


def test_reviewer_session_and_anonymous_are_refused_on_every_endpoint(two_runs, cast):
    run_a = two_runs[0]
    rita = APIClient()
    rita.force_login(cast.rita)
    for method, path in ENDPOINTS:
        anonymous = _call(APIClient(), method, run_a, path)
        reviewer = _call(rita, method, run_a, path)
        assert (anonymous.status_code, reviewer.status_code) == (401, 401), (method, path)


def test_a_forged_run_token_is_refused(two_runs):
    run_a = two_runs[0]
    response = _call(APIClient(), "get", run_a, "", Authorization="Bearer aprun_forged")
    assert response.status_code == 401


def test_a_runs_own_token_reads_its_run_and_only_the_hash_is_stored(two_runs):
    run_a, token_a, _, _ = two_runs
    response = _call(APIClient(), "get", run_a, "", Authorization=f"Bearer {token_a}")
    assert response.status_code == 200 and response.json()["id"] == run_a.pk
    run_a.refresh_from_db()
    assert token_a not in str(run_a.run_spec) and run_a.token_hash != token_a


def _started(run, token) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    answer = client.post(
        f"/api/v1/runner/runs/{run.pk}/start", {"runner_info": runner_info()}, format="json"
    )
    assert answer.status_code == 200, answer.json()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_X_RUN_ATTEMPT=str(answer.json()["attempt"])
    )
    return client


def test_start_moves_the_submission_to_running_and_returns_no_trials(two_runs):
    run_a, token_a, _, _ = two_runs
    _started(run_a, token_a)
    run_a.refresh_from_db()
    assert (run_a.status, run_a.attempt, run_a.submission.status) == ("running", 1, c.RUNNING)


def test_the_same_trial_index_posted_twice_is_stored_once(two_runs):
    run_a, token_a, _, _ = two_runs
    client = _started(run_a, token_a)
    payload = trial_payload(run_a, 0, 1)
    first = client.post(f"/api/v1/runner/runs/{run_a.pk}/trials", payload, format="json")
    second = client.post(f"/api/v1/runner/runs/{run_a.pk}/trials", payload, format="json")
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json() == {"index": 0, "created": False}
    assert Trial.objects.filter(run=run_a).count() == 1


def test_a_trial_index_past_the_next_one_is_a_conflict(two_runs):
    run_a, token_a, _, _ = two_runs
    client = _started(run_a, token_a)
    response = client.post(
        f"/api/v1/runner/runs/{run_a.pk}/trials", trial_payload(run_a, 2, 4), format="json"
    )
    assert response.status_code == 409
    assert "next index is 0" in response.json()["error"]["message"]


def test_a_trial_against_a_stored_spec_that_no_longer_fits_the_contract_is_a_conflict(two_runs):
    """A spec stored by another contract version (a deploy between dispatch and the trial)
    is named as such, a 409, never a 500."""
    run_a, token_a, _, _ = two_runs
    client = _started(run_a, token_a)
    payload = trial_payload(run_a, 0, 1)
    BenchmarkRun.objects.filter(pk=run_a.pk).update(run_spec={**run_a.run_spec, "retired": 1})
    response = client.post(f"/api/v1/runner/runs/{run_a.pk}/trials", payload, format="json")
    assert response.status_code == 409
    assert "stored spec does not fit the contract" in response.json()["error"]["message"]
    assert Trial.objects.filter(run=run_a).count() == 0


def test_a_trial_without_its_raw_records_in_storage_is_refused(two_runs):
    run_a, token_a, _, _ = two_runs
    client = _started(run_a, token_a)
    payload = trial_payload(run_a, 0, 1)
    payload["raw_records"]["key"] = f"runs/{run_a.pk}/a1/raw/trial-099.jsonl.gz"
    response = client.post(f"/api/v1/runner/runs/{run_a.pk}/trials", payload, format="json")
    assert response.status_code == 400
    assert "not in storage" in response.json()["error"]["message"]
    assert not Trial.objects.filter(run=run_a).exists()


def test_a_trial_whose_stored_bytes_differ_from_the_declared_sha256_is_refused(two_runs):
    run_a, token_a, _, _ = two_runs
    client = _started(run_a, token_a)
    payload = trial_payload(run_a, 0, 1)
    payload["raw_records"]["sha256"] = "0" * 64
    response = client.post(f"/api/v1/runner/runs/{run_a.pk}/trials", payload, format="json")
    assert response.status_code == 400 and "sha256" in response.json()["error"]["message"]


def test_a_superseded_attempt_can_no_longer_write(two_runs):
    run_a, token_a, _, _ = two_runs
    old = _started(run_a, token_a)
    _started(run_a, token_a)  # a redelivered task took over: attempt 2
    beat = old.post(f"/api/v1/runner/runs/{run_a.pk}/heartbeat", progress(), format="json")
    trial = old.post(
        f"/api/v1/runner/runs/{run_a.pk}/trials", trial_payload(run_a, 0, 1), format="json"
    )
    assert (beat.status_code, trial.status_code) == (409, 409)
    assert "superseded by attempt 2" in beat.json()["error"]["message"]


def test_resuming_returns_the_stored_trials_in_the_engines_shape(two_runs):
    run_a, token_a, _, _ = two_runs
    client = _started(run_a, token_a)
    client.post(f"/api/v1/runner/runs/{run_a.pk}/trials", trial_payload(run_a, 0, 1), format="json")
    again = APIClient()
    again.credentials(HTTP_AUTHORIZATION=f"Bearer {token_a}")
    answer = again.post(
        f"/api/v1/runner/runs/{run_a.pk}/start", {"runner_info": runner_info()}, format="json"
    ).json()
    assert answer["attempt"] == 2
    [trial] = answer["trials"]
    assert (trial["index"], trial["concurrency"], trial["phase"]) == (0, 1, "ramp")
    assert list(trial["verdicts"].values())[:2] == [True, False]


def test_completion_is_refused_while_a_trials_raw_records_are_missing(two_runs):
    run_a, token_a, _, _ = two_runs
    client = _started(run_a, token_a)
    client.post(f"/api/v1/runner/runs/{run_a.pk}/trials", trial_payload(run_a, 0, 1), format="json")
    from django.core.files.storage import storages

    done = completion(run_a)
    storages["artifacts"].delete(Trial.objects.get(run=run_a).raw_records_key)
    response = client.post(f"/api/v1/runner/runs/{run_a.pk}/complete", done, format="json")
    assert response.status_code == 400 and "not in storage" in response.json()["error"]["message"]
    run_a.refresh_from_db()
    assert (run_a.status, run_a.submission.status) == ("running", c.RUNNING)


def test_completion_verifies_and_puts_the_submission_in_review(two_runs):
    run_a, token_a, _, _ = two_runs
    client = _started(run_a, token_a)
    qualified = client.post(
        f"/api/v1/runner/runs/{run_a.pk}/qualification",
        {
            "checks": [
                {
                    "name": "streaming",
                    "status": "pass",
                    "summary": "ok",
                    "fatal": True,
                    "evidence": {},
                }
            ],
            "runner_info": runner_info(),
        },
        format="json",
    )
    assert qualified.status_code == 200, qualified.json()
    client.post(f"/api/v1/runner/runs/{run_a.pk}/trials", trial_payload(run_a, 0, 1), format="json")
    response = client.post(
        f"/api/v1/runner/runs/{run_a.pk}/complete", completion(run_a), format="json"
    )
    assert response.status_code == 200 and response.json() == {"status": c.IN_REVIEW}
    run_a.refresh_from_db()
    checks = {ch["name"]: ch["status"] for ch in run_a.verification.checks}
    assert run_a.status == "done"
    assert checks["request_accounting"] == "pass" and checks["telemetry"] == "warn"


def test_a_worker_failure_fails_the_submission_with_the_reason(two_runs):
    run_a, token_a, _, _ = two_runs
    client = _started(run_a, token_a)
    response = client.post(
        f"/api/v1/runner/runs/{run_a.pk}/fail",
        {"reason": "qualification failed: streaming"},
        format="json",
    )
    assert response.status_code == 200
    run_a.refresh_from_db()
    assert run_a.submission.status == c.FAILED
    assert run_a.submission.status_reason == "qualification failed: streaming"


@override_settings(RUNNER_API_BASE_URL="http://testserver")
def test_the_upload_grant_names_a_key_of_this_run_and_attempt(two_runs):
    run_a, token_a, _, _ = two_runs
    client = _started(run_a, token_a)
    grant = client.post(
        f"/api/v1/runner/runs/{run_a.pk}/uploads",
        {"kind": "raw_records", "sha256": "a" * 64, "size": 10, "trial_index": 3},
        format="json",
    ).json()
    assert grant["key"] == f"runs/{run_a.pk}/a1/raw/trial-003.jsonl.gz"
    assert grant["upload"]["method"] == "PUT"
    assert stored_records  # the helper stores objects the same way the grant names them


# --- the contract at the boundary (agentperf/contract.py, docs/pipeline.md "The contract") ----


def _refused(response) -> dict[str, list[str]]:
    assert response.status_code == 400, response.content[:500]
    error = response.json()["error"]
    assert error["code"] == "invalid" and "does not fit the contract" in error["message"]
    return error["fields"]


def test_a_trial_report_with_a_misspelled_field_is_refused_naming_it(two_runs):
    run_a, token_a, _, _ = two_runs
    client = _started(run_a, token_a)
    payload = trial_payload(run_a, 0, 1)
    tier = next(iter(payload["verdicts"]))
    payload["verdicts"][tier]["pass"] = payload["verdicts"][tier].pop("passed")
    payload["metrics"]["p25_speed"] = payload["metrics"].pop("p25_output_speed")
    fields = _refused(client.post(f"/api/v1/runner/runs/{run_a.pk}/trials", payload, format="json"))
    assert fields == {
        f"verdicts.{tier}.passed": ["required field missing"],
        f"verdicts.{tier}.pass": ["unknown field"],
        "metrics.p25_output_speed": ["required field missing"],
        "metrics.p25_speed": ["unknown field"],
    }
    assert not Trial.objects.filter(run=run_a).exists()


def test_a_trial_report_with_a_missing_field_is_refused_naming_it(two_runs):
    run_a, token_a, _, _ = two_runs
    client = _started(run_a, token_a)
    payload = trial_payload(run_a, 0, 1)
    del payload["raw_records"]["count"]
    del payload["telemetry"]
    fields = _refused(client.post(f"/api/v1/runner/runs/{run_a.pk}/trials", payload, format="json"))
    assert fields == {
        "raw_records.count": ["required field missing"],
        "telemetry": ["required field missing"],
    }
    assert not Trial.objects.filter(run=run_a).exists()


def test_a_trial_report_is_not_coerced(two_runs):
    run_a, token_a, _, _ = two_runs
    client = _started(run_a, token_a)
    payload = trial_payload(run_a, 0, 1)
    payload["concurrency"] = "1"
    tier = next(iter(payload["verdicts"]))
    payload["verdicts"][tier]["passed"] = 1
    fields = _refused(client.post(f"/api/v1/runner/runs/{run_a.pk}/trials", payload, format="json"))
    assert set(fields) == {"concurrency", f"verdicts.{tier}.passed"}


def test_a_trial_report_naming_another_tier_set_is_refused(two_runs):
    run_a, token_a, _, _ = two_runs
    client = _started(run_a, token_a)
    payload = trial_payload(run_a, 0, 1)
    payload["verdicts"]["9000 tok/s"] = payload["verdicts"].pop(next(iter(payload["verdicts"])))
    response = client.post(f"/api/v1/runner/runs/{run_a.pk}/trials", payload, format="json")
    assert response.status_code == 400 and "the run's tiers" in response.json()["error"]["message"]


def test_what_is_stored_is_the_trial_reports_own_documents(two_runs):
    run_a, token_a, _, _ = two_runs
    client = _started(run_a, token_a)
    payload = trial_payload(run_a, 0, 1)
    assert (
        client.post(f"/api/v1/runner/runs/{run_a.pk}/trials", payload, format="json").status_code
        == 201
    )
    trial = Trial.objects.get(run=run_a)
    assert (trial.metrics, trial.verdicts, trial.telemetry) == (
        payload["metrics"],
        payload["verdicts"],
        payload["telemetry"],
    )
    assert trial.raw_records_count == payload["raw_records"]["count"]


def test_every_report_of_the_worker_is_checked_against_the_contract(two_runs):
    run_a, token_a, _, _ = two_runs
    client = _started(run_a, token_a)
    base = f"/api/v1/runner/runs/{run_a.pk}"
    beat = progress(trial=1)
    beat["progress"]["trial_k"] = beat["progress"].pop("trial")
    assert _refused(client.post(f"{base}/heartbeat", beat, format="json")) == {
        "progress.trial_k": ["unknown field"]
    }
    done = completion(run_a)
    done["tiers"] = []  # sent once, never stored: not part of the contract any more
    assert _refused(client.post(f"{base}/complete", done, format="json")) == {
        "tiers": ["unknown field"]
    }
    assert "reason" in _refused(client.post(f"{base}/fail", {"why": "x"}, format="json"))
    info = runner_info()
    del info["hostname"]
    assert _refused(
        client.post(f"{base}/qualification", {"checks": [], "runner_info": info}, format="json")
    ) == {"runner_info.hostname": ["required field missing"]}
    run_a.refresh_from_db()
    assert (run_a.status, run_a.qualification) == ("running", [])
