"""The fixed cast tries every vendor endpoint against Alice's objects (docs/security.md
"Permission tests: the fixed cast")."""

import hashlib

import pytest
from rest_framework.test import APIClient

from catalog.models import Dataset
from demo.synthetic import trial_metrics
from runs.models import BenchmarkRun, Trial, VerificationReport
from submissions import constants as c
from submissions.models import Artifact, Submission
from submissions.services.submissions import submission_create
from tests.submissions.support import make_catalog, session_client, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(cast):
    """Alice's submission with a run, a trial, raw records, a report and an attachment."""
    catalog = make_catalog()
    sub = submission_create(org=cast.org_a, config_text=catalog.yaml(), created_by=cast.alice)
    run = BenchmarkRun.objects.create(
        submission=sub,
        status="running",
        progress={"phase": "search", "search_phase": "ramp", "trial": 2, "max_trials": 7},
    )
    Trial.objects.create(
        run=run,
        index=0,
        concurrency=1,
        metrics=trial_metrics(speed=150.0, throughput=100.0, ttft_p75=1.0, accelerators=1),
        raw_records_key="raw/a/0",
    )
    Artifact.objects.create(
        kind=Artifact.KIND_RAW_RECORDS,
        storage_key=f"raw/run-{run.pk}.jsonl.gz",
        sha256="0" * 64,
        size=10,
        org=cast.org_a,
        run=run,
    )
    VerificationReport.objects.create(run=run, status="pass", checks=[{"name": "streaming"}])
    attachment = Artifact.objects.create(
        kind=Artifact.KIND_ATTACHMENT,
        storage_key=f"attachments/sub-{sub.pk}/x",
        sha256=hashlib.sha256(b"x").hexdigest(),
        size=1,
        org=cast.org_a,
        submission=sub,
    )
    public = Dataset.objects.create(
        name="tuning", version="1", visibility="public", sha256="a" * 64, storage_key="d/pub"
    )
    private = Dataset.objects.create(
        name="test", version="1", visibility="private", sha256="b" * 64, storage_key="d/priv"
    )
    return {
        "cast": cast,
        "catalog": catalog,
        "sub": sub,
        "run": run,
        "attachment": attachment,
        "public": public,
        "private": private,
    }


def endpoints(w):
    """(method, path, body, content type) of every endpoint that touches Alice's objects."""
    sub, run, att = w["sub"].pk, w["run"].pk, w["attachment"].pk
    yaml_body = w["catalog"].yaml(notes="resubmitted")
    presign = {"name": "a.txt", "size": 3, "sha256": "c" * 64}
    return [
        ("get", f"/api/v1/submissions/{sub}/", None, None),
        ("get", f"/api/v1/submissions/{sub}/runs/", None, None),
        ("get", f"/api/v1/submissions/{sub}/attachments/", None, None),
        ("post", f"/api/v1/submissions/{sub}/attachments/", presign, "json"),
        ("post", f"/api/v1/submissions/{sub}/attachments/{att}/verify/", None, None),
        ("get", f"/api/v1/runs/{run}/", None, None),
        ("get", f"/api/v1/runs/{run}/verification/", None, None),
        ("get", f"/api/v1/runs/{run}/raw-records/", None, None),
        ("post", f"/api/v1/submissions/{sub}/resubmit/", yaml_body, "application/yaml"),
        ("post", f"/api/v1/submissions/{sub}/withdraw/", {"reason": "x"}, "json"),
    ]


def call(client, method, path, body, content_type):
    if body is None:
        return getattr(client, method)(path)
    if content_type == "json":
        return getattr(client, method)(path, body, format="json")
    return getattr(client, method)(path, body, content_type=content_type)


def bobs_clients(cast):
    return {"bob token": token_client(cast.org_b), "bob session": session_client(cast.bob)}


def test_bob_gets_404_on_every_endpoint_of_alices_objects_and_changes_nothing(world):
    cast = world["cast"]
    for who, client in bobs_clients(cast).items():
        for method, path, body, ct in endpoints(world):
            response = call(client, method, path, body, ct)
            assert response.status_code == 404, (who, method, path, response.content)
            assert response.json()["error"]["code"] == "not_found"
    sub = Submission.objects.get(pk=world["sub"].pk)
    assert sub.status == c.VALIDATED
    assert Submission.objects.count() == 1
    assert Artifact.objects.filter(kind=Artifact.KIND_ATTACHMENT).count() == 1


def test_bobs_listing_shows_none_of_alices_submissions(world):
    for client in bobs_clients(world["cast"]).values():
        response = client.get("/api/v1/submissions/")
        assert response.status_code == 200 and response.json() == []


def test_anonymous_gets_401_on_every_vendor_endpoint(world):
    client = APIClient()
    paths = [
        *endpoints(world),
        ("get", "/api/v1/submissions/", None, None),
        ("post", "/api/v1/submissions/", world["catalog"].yaml(), "application/yaml"),
        ("get", "/api/v1/datasets/", None, None),
        ("get", f"/api/v1/datasets/{world['public'].pk}/download/", None, None),
    ]
    for method, path, body, ct in paths:
        response = call(client, method, path, body, ct)
        assert response.status_code == 401, (method, path)
        assert response.json()["error"]["code"] == "not_authenticated"
    assert Submission.objects.count() == 1


def test_a_bad_token_is_401_not_anonymous(world):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer apf_000000000000_nope")
    response = client.get("/api/v1/submissions/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"


def test_rita_without_a_vendor_org_is_refused_by_the_vendor_api(world):
    client = session_client(world["cast"].rita)
    for method, path, body, ct in [*endpoints(world), ("get", "/api/v1/submissions/", None, None)]:
        response = call(client, method, path, body, ct)
        assert response.status_code == 403, (method, path)
        assert response.json()["error"]["code"] == "permission_denied"


def test_alice_reaches_every_endpoint_of_her_own_objects(world, settings):
    settings.STORAGES = {**settings.STORAGES}  # keep the session's S3 storage
    client = token_client(world["cast"].org_a)
    expected = {
        f"/api/v1/submissions/{world['sub'].pk}/attachments/": {200, 201},
        f"/api/v1/submissions/{world['sub'].pk}/attachments/{world['attachment'].pk}/verify/": {
            409  # nothing uploaded yet: reached the object, refused the action
        },
        f"/api/v1/submissions/{world['sub'].pk}/resubmit/": {201},
    }
    for method, path, body, ct in endpoints(world)[:-1]:
        response = call(client, method, path, body, ct)
        assert response.status_code in expected.get(path, {200}), (method, path, response.content)


def test_a_read_only_token_cannot_submit(world):
    client = token_client(world["cast"].org_a, scopes=("read",))
    response = client.post(
        "/api/v1/submissions/", world["catalog"].yaml(), content_type="application/yaml"
    )
    assert response.status_code == 403
    assert "submit" in response.json()["error"]["message"]
    assert client.get("/api/v1/submissions/").status_code == 200


def test_a_private_dataset_is_never_listed_or_served(world):
    client = token_client(world["cast"].org_a)
    listed = [d["name"] for d in client.get("/api/v1/datasets/").json()]
    assert listed == ["tuning"]
    response = client.get(f"/api/v1/datasets/{world['private'].pk}/download/")
    assert response.status_code == 404
    response = client.get(f"/api/v1/datasets/{world['public'].pk}/download/")
    assert response.status_code == 200 and "d/pub" in response.json()["url"]


def test_the_deployment_config_schema_is_public(world):
    response = APIClient().get("/api/v1/schema/deployment-config.json")
    assert response.status_code == 200
    assert response.json()["title"] == "AgentPerf deployment config"
