"""Issue 16's friction list, one test (or two) per item, through the real API, commands and
pages: accounts from manage.py, queue position, a finished run that says so, the
published result in the vendor API, the reviewer's label, the public tuning subset, the
typed OpenAPI body, idempotent replay across encodings, and the home page of a fresh demo."""

from __future__ import annotations

import datetime as dt
import hashlib
import urllib.request
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from catalog.models import Dataset
from demo.synthetic import make_org, make_published_result, make_tier_set
from leaderboard.models import Result
from runs.dispatch import submission_dispatch
from runs.models import BenchmarkRun
from submissions import constants as c
from submissions.models import Submission
from tests.review.builders import advance_to_in_review, finish_run
from tests.submissions.configs import as_json
from tests.submissions.support import make_catalog, token_client

pytestmark = pytest.mark.django_db
YAML = "application/yaml"
PASSWORD = "a-long-test-password-42"


def run(*args, **env) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue().strip(), err.getvalue().strip()


def submit(client, body, content_type=YAML, key=None):
    extra = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return client.post("/api/v1/submissions/", body, content_type=content_type, **extra)


# --- manage.py create_vendor_user / create_reviewer --------------------------------------


def test_create_vendor_user_gives_a_portal_login_in_the_org_and_no_review_console(monkeypatch):
    run("create_org", "Acme GPUs")
    monkeypatch.setenv("AGENTPERF_PASSWORD", PASSWORD)
    out, _ = run("create_vendor_user", "vera", "--org", "acme-gpus", "--role", "admin")
    assert "vendor user 'vera' is admin of Acme GPUs" in out
    client = Client()
    assert client.login(username="vera", password=PASSWORD)
    assert client.get("/portal/").status_code == 200
    assert client.get("/review/").status_code == 403


def test_create_reviewer_gives_a_review_console_login_without_superuser(monkeypatch):
    monkeypatch.delenv("AGENTPERF_PASSWORD", raising=False)
    out, err = run("create_reviewer", "rex")
    generated = out.splitlines()[-1]
    assert "shown once" in err and len(generated) >= 20
    client = Client()
    assert client.login(username="rex", password=generated)
    assert client.get("/review/").status_code == 200
    assert client.get("/admin/auth/user/").status_code == 403  # staff, not superuser


def test_a_vendor_member_cannot_be_made_a_reviewer_nor_the_other_way(monkeypatch):
    monkeypatch.setenv("AGENTPERF_PASSWORD", PASSWORD)
    run("create_org", "Acme GPUs")
    run("create_vendor_user", "vera", "--org", "Acme GPUs")
    with pytest.raises(CommandError, match="is a member of Acme GPUs"):
        run("create_reviewer", "vera")
    run("create_reviewer", "rex")
    with pytest.raises(CommandError, match="is a reviewer"):
        run("create_vendor_user", "rex", "--org", "Acme GPUs")
    with pytest.raises(CommandError, match="no organization"):
        run("create_vendor_user", "nobody", "--org", "Nowhere")


# --- progress: queued, finished ----------------------------------------------------------


def _catalog():
    """A catalog whose model has its tier set, so dispatch can queue its runs."""
    catalog = make_catalog()
    make_tier_set(model=catalog.model)
    return catalog


def _queued(client, catalog, n: int) -> list[int]:
    ids = []
    for i in range(n):
        sub = Submission.objects.get(pk=submit(client, catalog.yaml(notes=f"run {i}")).json()["id"])
        ids.append(submission_dispatch(submission=sub).pk)
    return ids


def test_a_queued_run_shows_its_queue_position_and_an_estimated_start(cast):
    alice, catalog = token_client(cast.org_a), _catalog()
    earlier = BenchmarkRun.objects.get(pk=_queued(alice, catalog, 1)[0])
    finish_run(earlier.submission, run=earlier)  # one finished run of 600 s on the queue
    now = timezone.now()
    BenchmarkRun.objects.filter(pk=earlier.pk).update(
        started_at=now - dt.timedelta(seconds=700), finished_at=now - dt.timedelta(seconds=100)
    )
    first, second = _queued(alice, catalog, 2)
    progress = alice.get(f"/api/v1/runs/{second}/").json()["progress"]
    assert progress["phase"] == "queued" and progress["queue_position"] == 2
    assert progress["runs_ahead"] == 1 and progress["queue"] == earlier.queue
    assert progress["estimated_start_s"] == 600
    assert "last 1 finished runs" in progress["estimate_basis"]
    listed = alice.get("/api/v1/submissions/").json()
    latest = next(s["latest_run"] for s in listed if s["latest_run"]["id"] == first)
    assert latest["progress"]["queue_position"] == 1


def test_a_queued_run_without_history_has_a_position_and_no_invented_estimate(cast):
    alice = token_client(cast.org_a)
    [only] = _queued(alice, _catalog(), 1)
    progress = alice.get(f"/api/v1/runs/{only}/").json()["progress"]
    assert (progress["queue_position"], progress["estimated_start_s"]) == (1, None)


def test_a_finished_run_says_done_not_its_last_search_phase(cast):
    alice = token_client(cast.org_a)
    [run_id] = _queued(alice, _catalog(), 1)
    run_row = BenchmarkRun.objects.get(pk=run_id)
    finish_run(run_row.submission, run=run_row)
    BenchmarkRun.objects.filter(pk=run_id).update(
        progress={  # the worker's last heartbeat
            "phase": "verifying",
            "search_phase": "confirm",
            "trial": 9,
            "max_trials": 40,
            "concurrency": 24,
            "trials_done": 9,
        }
    )
    progress = alice.get(f"/api/v1/runs/{run_id}/").json()["progress"]
    assert progress["phase"] == "done" and progress["search_phase"] == "done"
    assert "trial" not in progress and "concurrency" not in progress
    assert progress["trials_done"] == 9


# --- the published result in the vendor API ----------------------------------------------


def test_the_vendor_api_gives_the_published_results_id_and_urls(cast):
    result = make_published_result(org=cast.org_a)
    alice = token_client(cast.org_a)
    body = alice.get(f"/api/v1/submissions/{result.submission_id}/").json()
    assert body["result"]["id"] == result.pk and body["result"]["status"] == "published"
    assert body["result"]["url"] == f"http://testserver/results/{result.pk}/"
    assert body["result"]["api_url"].endswith(f"/api/v1/public/results/{result.pk}/")
    assert Client().get(body["result"]["url"]).status_code == 200
    listed = alice.get("/api/v1/submissions/").json()
    assert [s["result"]["id"] for s in listed] == [result.pk]


def test_before_publishing_the_result_is_null(cast):
    alice = token_client(cast.org_a)
    body = submit(alice, make_catalog().yaml()).json()
    assert body["result"] is None


# --- the reviewer's public label ---------------------------------------------------------


def test_the_reviewer_sets_the_public_label_when_publishing(cast):
    alice = token_client(cast.org_a)
    sub = Submission.objects.get(pk=submit(alice, _catalog().yaml()).json()["id"])
    run_row = submission_dispatch(submission=sub)
    advance_to_in_review(sub)
    finish_run(sub, run=run_row)
    reviewer = Client()
    reviewer.force_login(cast.rita)
    page = reviewer.get(f"/review/submissions/{sub.pk}/").content.decode()
    assert 'name="publish-label"' in page and sub.hardware.name in page
    too_long = reviewer.post(
        f"/review/submissions/{sub.pk}/publish/",
        {"publish-reason": "verified", "publish-label": "x" * 201},
    )
    assert too_long.status_code == 400 and not Result.objects.exists()
    response = reviewer.post(
        f"/review/submissions/{sub.pk}/publish/",
        {"publish-reason": "verified", "publish-label": "H100 ×8 · vLLM 0.14 (tuned, Dec)"},
    )
    assert response.status_code == 302
    assert Result.objects.get(submission=sub).label == "H100 ×8 · vLLM 0.14 (tuned, Dec)"


def test_a_publish_without_a_label_takes_the_suggestion_not_a_generic_one(cast):
    alice = token_client(cast.org_a)
    sub = Submission.objects.get(pk=submit(alice, _catalog().yaml()).json()["id"])
    run_row = submission_dispatch(submission=sub)
    advance_to_in_review(sub)
    finish_run(sub, run=run_row)
    reviewer = Client()
    reviewer.force_login(cast.rita)
    reviewer.post(f"/review/submissions/{sub.pk}/publish/", {"publish-reason": "verified"})
    label = Result.objects.get(submission=sub).label
    engine = sub.config["engine"]
    assert label.startswith(f"{sub.hardware.name} · {engine['name']}") and " now (" not in label


# --- the public tuning subset ------------------------------------------------------------


def test_the_tuning_subset_is_published_listed_and_served(cast):
    from agentperf.engine.trajectory import dataset_from_bytes
    from catalog.datasets import private_test_set

    private_test_set(size="small")
    out, _ = run("publish_tuning_subset")
    run("publish_tuning_subset")  # idempotent
    assert Dataset.objects.filter(visibility="public").count() == 1
    alice = token_client(cast.org_a)
    listed = alice.get("/api/v1/datasets/").json()
    assert [d["name"] for d in listed] == ["agentperf-tuning-subset"]
    link = alice.get(f"/api/v1/datasets/{listed[0]['id']}/download/").json()
    with urllib.request.urlopen(link["url"], timeout=30) as response:
        content = response.read()
    assert hashlib.sha256(content).hexdigest() == link["sha256"]
    assert dataset_from_bytes(content).digest() == listed[0]["sha256"]
    assert Client().get("/api/v1/datasets/").status_code in (401, 403)


# --- the OpenAPI body of POST /submissions/ ----------------------------------------------


def test_the_openapi_submission_body_references_the_deployment_config_schema(client):
    schema = client.get("/api/schema/?format=json").json()
    ref = {"$ref": "#/components/schemas/DeploymentConfig"}
    for path in ("/api/v1/submissions/", "/api/v1/submissions/{id}/resubmit/"):
        content = schema["paths"][path]["post"]["requestBody"]["content"]
        assert content["application/yaml"]["schema"] == ref
        assert content["application/json"]["schema"] == ref
    component = schema["components"]["schemas"]["DeploymentConfig"]
    assert {"model", "topology", "launcher"} <= set(component["properties"])
    assert "$defs" not in component and "#/$defs/" not in str(schema)


# --- idempotent replay across encodings ---------------------------------------------------


def test_the_same_config_resent_as_json_with_the_same_key_is_a_replay(cast):
    alice, catalog = token_client(cast.org_a), make_catalog()
    first = submit(alice, catalog.yaml(), key="k-1")
    again = submit(alice, as_json(catalog.config()), "application/json", key="k-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"] and again["Idempotent-Replayed"] == "true"
    other = submit(alice, as_json(catalog.config(notes="changed")), "application/json", key="k-1")
    assert other.status_code == 409
    assert Submission.objects.count() == 1


# --- the home page of a fresh demo --------------------------------------------------------


def test_the_home_page_shows_simulated_results_labelled_when_nothing_measured():
    sim = make_published_result(simulated=True, label="Twin dry run")
    html = Client().get("/").content.decode()
    assert "No measured results yet" in html and "Nothing to show" not in html.split("Latest")[0]
    assert "Twin dry run" in html and f"{sim.hardware.name} [simulated]" in html


def test_once_a_measured_result_exists_simulated_ones_are_hidden_again():
    make_published_result(simulated=True, label="Twin dry run")
    make_published_result(label="Measured box", org=make_org())
    html = Client().get("/").content.decode()
    assert "No measured results yet" not in html
    assert "Measured box" in html and "Twin dry run" not in html
    assert c.PUBLISHED == "published"
