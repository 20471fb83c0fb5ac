import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from agentperf.engine.trial import TierVerdict
from demo.synthetic import trial_metrics
from runs.models import BenchmarkRun
from submissions import constants as c
from submissions.models import Submission
from submissions.services.submissions import submission_create
from tests.submissions.configs import as_json
from tests.submissions.support import make_catalog

# the worker's heartbeat (agentperf/contract.py Progress)
PROGRESS = {"phase": "search", "search_phase": "ramp", "trial": 3, "max_trials": 8}

pytestmark = pytest.mark.django_db


def logged_in(user) -> Client:
    client = Client()
    assert client.login(username=user.username, password=f"{user.username}-password-123")
    return client


@pytest.fixture
def catalog():
    return make_catalog()


@pytest.fixture
def alices(cast, catalog):
    sub = submission_create(org=cast.org_a, config_text=catalog.yaml(), created_by=cast.alice)
    run = BenchmarkRun.objects.create(submission=sub, status="running", progress=PROGRESS)
    run.trials.create(
        index=0,
        concurrency=4,
        phase="ramp",
        metrics=trial_metrics(speed=123.4, throughput=5678.0, ttft_p75=0.456, accelerators=1),
        verdicts={  # the engine's own verdict shape, as the worker stores it
            "20 tok/s": TierVerdict(passed=True).to_dict(),
            "300 tok/s": TierVerdict(passed=False, reasons=["p25 speed 123.4 < 300"]).to_dict(),
        },
    )
    return sub


def portal_paths(sub):
    return [
        "/portal/",
        "/portal/submit/",
        f"/portal/submissions/{sub.pk}/",
        f"/portal/submissions/{sub.pk}/status.json",
    ]


def test_the_login_page_signs_a_vendor_in_and_lands_on_the_portal(cast):
    client = Client()
    page = client.get("/accounts/login/")
    assert page.status_code == 200 and b"Vendor portal login" in page.content
    response = client.post(
        "/accounts/login/", {"username": "alice", "password": "alice-password-123"}
    )
    assert response.status_code == 302 and response["Location"] == "/portal/"


def test_anonymous_is_sent_to_login_from_every_portal_page(alices):
    client = Client()
    for path in [*portal_paths(alices), f"/portal/submissions/{alices.pk}/withdraw/"]:
        response = client.get(path) if "withdraw" not in path else client.post(path)
        assert response.status_code == 302, path
        assert response["Location"].startswith("/accounts/login/?next="), path


def test_bob_gets_404_for_alices_submission_pages_and_cannot_withdraw_it(cast, alices):
    client = logged_in(cast.bob)
    for path in portal_paths(alices)[2:]:
        assert client.get(path).status_code == 404, path
    assert client.post(f"/portal/submissions/{alices.pk}/withdraw/").status_code == 404
    assert Submission.objects.get(pk=alices.pk).status == c.VALIDATED
    dashboard = client.get("/portal/").content.decode()
    assert f"#{alices.pk}<" not in dashboard


def test_rita_without_a_vendor_org_is_refused(cast, alices):
    client = logged_in(cast.rita)
    for path in portal_paths(alices):
        assert client.get(path).status_code == 403, path


def test_alice_sees_her_submissions_with_status_and_progress(cast, alices):
    page = logged_in(cast.alice).get("/portal/").content.decode()
    assert f"#{alices.pk}" in page and "Validated" in page and "search" in page
    assert f'data-status-url="/portal/submissions/{alices.pk}/status.json"' in page


def test_alice_sees_her_orgs_review_notifications_but_bob_does_not(cast, alices):
    from submissions.models import Notification

    Notification.objects.create(
        org=cast.org_a,
        submission=alices,
        action="request_changes",
        subject=f"Changes requested on #{alices.pk}",
        body="Pin the container digest.",
    )
    page = logged_in(cast.alice).get("/portal/").content.decode()
    assert f"Changes requested on #{alices.pk}" in page and "Pin the container digest." in page
    assert "Pin the container digest." not in logged_in(cast.bob).get("/portal/").content.decode()


def test_the_status_endpoint_reports_live_progress(cast, alices):
    body = logged_in(cast.alice).get(f"/portal/submissions/{alices.pk}/status.json").json()
    assert body["status"] == c.VALIDATED
    assert body["run"]["progress"] == PROGRESS
    assert body["run"]["trials"] == 1


def test_the_detail_page_previews_the_trial_points_before_publication(cast, alices):
    page = logged_in(cast.alice).get(f"/portal/submissions/{alices.pk}/").content.decode()
    assert 'id="trial-points"' in page
    assert "123.4" in page and "0.456" in page and "5678" in page
    assert "20 tok/s ✓" in page and "300 tok/s ✗" in page
    assert "trial 3 of 8" in page  # the heartbeat's max_trials


def test_pasting_a_valid_config_creates_a_submission_and_shows_it(cast, catalog):
    client = logged_in(cast.alice)
    response = client.post(
        "/portal/submit/", {"config_text": catalog.yaml(), "idempotency_key": "form-1"}
    )
    sub = Submission.objects.get(org=cast.org_a)
    assert response.status_code == 302 and response["Location"] == f"/portal/submissions/{sub.pk}/"
    assert sub.created_by == cast.alice and sub.status == c.VALIDATED


def test_submitting_the_same_form_twice_creates_one_submission(cast, catalog):
    client = logged_in(cast.alice)
    data = {"config_text": catalog.yaml(), "idempotency_key": "form-1"}
    client.post("/portal/submit/", data)
    client.post("/portal/submit/", data)
    assert Submission.objects.filter(org=cast.org_a).count() == 1


def test_an_uploaded_json_file_is_accepted(cast, catalog):
    upload = SimpleUploadedFile("config.json", as_json(catalog.config()).encode())
    response = logged_in(cast.alice).post("/portal/submit/", {"config_file": upload})
    assert response.status_code == 302
    assert Submission.objects.filter(org=cast.org_a, is_simulated=True).count() == 1


def test_schema_errors_are_shown_inline_at_the_offending_line(cast, catalog):
    doc = catalog.config()
    doc["topology"]["roles"][0]["tp"] = 2
    from tests.submissions.configs import as_yaml

    text = as_yaml(doc)
    response = logged_in(cast.alice).post("/portal/submit/", {"config_text": text})
    assert response.status_code == 400
    page = response.content.decode()
    assert 'data-path="topology.roles.0.tp"' in page
    # the error sits inside the list item of the line that says "tp: 2"
    item = page.split('data-path="topology.roles.0.tp"')[0].rsplit("<li", 1)[1]
    assert "tp: 2" in item
    assert not Submission.objects.exists()


def test_an_empty_form_asks_for_a_config(cast):
    response = logged_in(cast.alice).post("/portal/submit/", {"config_text": "  "})
    assert response.status_code == 200 and b"Paste a config or choose a file." in response.content


def test_alice_withdraws_her_submission_from_the_portal(cast, alices):
    client = logged_in(cast.alice)
    response = client.post(f"/portal/submissions/{alices.pk}/withdraw/", {"reason": "typo"})
    assert response.status_code == 302
    assert Submission.objects.get(pk=alices.pk).status == c.WITHDRAWN


def test_the_submit_page_says_a_config_is_public_and_refuses_a_clear_credential(cast):
    client = logged_in(cast.alice)
    page = client.get("/portal/submit/").content.decode()
    assert "A config is public." in page and "{secret: NAME}" in page
    catalog = make_catalog()
    doc = catalog.config()
    doc["launch"] = {"command": "vllm serve", "args": ["--max-model-len 8192 --api-key Zt8qLm3Vx9"]}
    response = client.post("/portal/submit/", {"config_text": as_json(doc)})
    assert response.status_code == 400
    assert 'data-path="launch.args.0"' in response.content.decode()
    assert not Submission.objects.exists()
