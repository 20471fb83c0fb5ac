import hashlib
import json
import urllib.request
import uuid

import pytest
from django.core.files.storage import storages
from django.urls import include, path
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator

from demo.synthetic import make_org, trial_metrics
from portal.api.access import VendorSubmitThrottle
from runs.models import BenchmarkRun
from submissions import constants as c
from submissions.models import Artifact, Submission
from tests.submissions.configs import as_json
from tests.submissions.support import make_catalog, session_client, token_client

pytestmark = pytest.mark.django_db

YAML = "application/yaml"


@pytest.fixture
def alice(cast):
    return token_client(cast.org_a)


@pytest.fixture
def catalog():
    return make_catalog()


def submit(client, body, content_type=YAML, key=None):
    extra = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return client.post("/api/v1/submissions/", body, content_type=content_type, **extra)


def test_a_yaml_config_is_accepted_and_validated(alice, catalog):
    response = submit(alice, catalog.yaml())
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == c.VALIDATED
    assert body["model"] == catalog.model.slug and body["hardware"] == catalog.hardware.slug
    assert body["config"]["launcher"]["simulated"]["profile"] == "tiny"


def test_a_json_config_is_accepted(alice, catalog):
    response = submit(alice, as_json(catalog.config()), "application/json")
    assert response.status_code == 201 and response.json()["is_simulated"] is True


def test_schema_errors_name_the_field_path_in_the_error_shape(alice, catalog):
    doc = catalog.config()
    doc["topology"]["roles"][0]["tp"] = 4
    doc["engine"]["flavour"] = "x"
    response = submit(alice, as_json(doc), "application/json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_config"
    assert set(error["fields"]) == {"topology.roles.0.tp", "engine.flavour"}
    assert not Submission.objects.exists()


def test_a_clear_secret_is_rejected_and_not_stored_anywhere(alice, catalog):
    doc = catalog.config(env={"OPENAI_API_KEY": "sk-verysecret-123"})
    response = submit(alice, as_json(doc), "application/json")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["env.OPENAI_API_KEY"]
    assert "sk-verysecret" not in response.content.decode()
    assert not Submission.objects.exists()


def test_a_config_over_the_size_limit_gets_413(alice, catalog, settings):
    settings.MAX_CONFIG_BYTES = 1000
    response = submit(alice, catalog.yaml(notes="x" * 2000))
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"


def test_an_unparseable_body_names_the_problem(alice):
    response = submit(alice, "model: [unclosed\n")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unparseable"


def test_an_unsupported_media_type_gets_415(alice, catalog):
    response = submit(alice, "<x/>", "application/xml")
    assert response.status_code == 415


def test_the_same_idempotency_key_and_body_replay_the_first_response(alice, catalog):
    body = catalog.yaml()
    first = submit(alice, body, key="abc")
    again = submit(alice, body, key="abc")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again["Idempotent-Replayed"] == "true"
    assert Submission.objects.count() == 1


def test_the_same_idempotency_key_with_another_body_gets_409(alice, catalog):
    submit(alice, catalog.yaml(), key="abc")
    response = submit(alice, catalog.yaml(notes="changed"), key="abc")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "idempotency_conflict"


def test_alice_lists_and_retrieves_her_submissions(alice, catalog, cast):
    mine = submit(alice, catalog.yaml()).json()["id"]
    submit(token_client(cast.org_b), catalog.yaml())
    listed = alice.get("/api/v1/submissions/").json()
    assert [s["id"] for s in listed] == [mine]
    detail = alice.get(f"/api/v1/submissions/{mine}/").json()
    assert detail["config_sha256"] == hashlib.sha256(catalog.yaml().encode()).hexdigest()


def test_a_portal_session_uses_the_api_as_its_org(cast, catalog):
    client = session_client(cast.alice)
    response = submit(client, catalog.yaml())
    assert response.status_code == 201
    assert Submission.objects.get(pk=response.json()["id"]).org == cast.org_a


def test_withdraw_then_withdraw_again_is_a_conflict(alice, catalog):
    sub = submit(alice, catalog.yaml()).json()["id"]
    response = alice.post(f"/api/v1/submissions/{sub}/withdraw/", {"reason": "typo"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == c.WITHDRAWN
    again = alice.post(f"/api/v1/submissions/{sub}/withdraw/", {}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"


def test_resubmit_creates_a_linked_submission(alice, catalog):
    old = submit(alice, catalog.yaml()).json()["id"]
    response = alice.post(
        f"/api/v1/submissions/{old}/resubmit/", catalog.yaml(notes="v2"), content_type=YAML
    )
    assert response.status_code == 201
    assert response.json()["previous"] == old
    assert alice.get(f"/api/v1/submissions/{old}/").json()["status"] == c.WITHDRAWN


def test_run_status_shows_live_progress_and_trials(alice, catalog):
    sub = Submission.objects.get(pk=submit(alice, catalog.yaml()).json()["id"])
    progress = {
        "phase": "search",
        "search_phase": "bisect",
        "trial": 5,
        "max_trials": 9,
        "concurrency": 24,
        "last_verdicts": {},
    }
    run = BenchmarkRun.objects.create(
        submission=sub, status="running", progress=progress, run_spec={"secret": "x"}
    )
    metrics = trial_metrics(speed=99.0, throughput=100.0, ttft_p75=1.0, accelerators=1)
    run.trials.create(index=0, concurrency=1, metrics=metrics, verdicts={})
    body = alice.get(f"/api/v1/runs/{run.pk}/").json()
    assert body["progress"] == progress
    assert [t["concurrency"] for t in body["trials"]] == [1]
    assert "run_spec" not in body and "token_hash" not in body
    listed = alice.get(f"/api/v1/submissions/{sub.pk}/").json()
    assert listed["latest_run"]["progress"]["trial"] == 5


def test_a_verification_report_not_yet_written_is_a_404_saying_so(alice, catalog):
    sub = Submission.objects.get(pk=submit(alice, catalog.yaml()).json()["id"])
    run = BenchmarkRun.objects.create(submission=sub)
    response = alice.get(f"/api/v1/runs/{run.pk}/verification/")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_ready"


def test_raw_records_are_served_through_presigned_links_that_work(alice, catalog, cast):
    from submissions.services.artifacts import artifact_store

    sub = Submission.objects.get(pk=submit(alice, catalog.yaml()).json()["id"])
    run = BenchmarkRun.objects.create(submission=sub)
    payload = b'{"t_send": 1}\n'
    artifact_store(
        kind=Artifact.KIND_RAW_RECORDS,
        key=f"test-raw/{uuid.uuid4().hex}.jsonl",
        content=payload,
        org=cast.org_a,
        run=run,
    )
    files = alice.get(f"/api/v1/runs/{run.pk}/raw-records/").json()["files"]
    assert len(files) == 1
    with urllib.request.urlopen(files[0]["url"], timeout=10) as resp:  # real SeaweedFS
        assert resp.read() == payload


def test_an_attachment_is_uploaded_with_a_presigned_post_and_verified(alice, catalog):
    sub = submit(alice, catalog.yaml()).json()["id"]
    content = b"engine launch log\n" * 10
    grant = alice.post(
        f"/api/v1/submissions/{sub}/attachments/",
        {"name": "launch.log", "size": len(content), "sha256": hashlib.sha256(content).hexdigest()},
        format="json",
    )
    assert grant.status_code == 201, grant.content
    upload = grant.json()
    assert upload["method"] == "POST"
    status = _multipart_post(upload["url"], upload["fields"], content)
    assert status in (200, 201, 204)
    verified = alice.post(
        f"/api/v1/submissions/{sub}/attachments/{upload['attachment']['id']}/verify/"
    )
    assert verified.status_code == 200 and verified.json()["verified_at"]


def test_an_attachment_over_the_limit_is_refused_before_any_upload(alice, catalog, settings):
    settings.MAX_ATTACHMENT_BYTES = 1000
    sub = submit(alice, catalog.yaml()).json()["id"]
    response = alice.post(
        f"/api/v1/submissions/{sub}/attachments/",
        {"name": "big.bin", "size": 1001, "sha256": "0" * 64},
        format="json",
    )
    assert response.status_code == 413 and list(response.json()["error"]["fields"]) == ["size"]
    assert not Artifact.objects.filter(kind=Artifact.KIND_ATTACHMENT).exists()


def test_uploaded_bytes_that_differ_from_the_declared_digest_fail_verification(alice, catalog):
    sub = submit(alice, catalog.yaml()).json()["id"]
    grant = alice.post(
        f"/api/v1/submissions/{sub}/attachments/",
        {"name": "a.txt", "size": 5, "sha256": hashlib.sha256(b"hello").hexdigest()},
        format="json",
    ).json()
    _multipart_post(grant["url"], grant["fields"], b"HELLO")
    response = alice.post(
        f"/api/v1/submissions/{sub}/attachments/{grant['attachment']['id']}/verify/"
    )
    assert response.status_code == 409
    assert Artifact.objects.get(pk=grant["attachment"]["id"]).verified_at is None


def test_the_filesystem_profile_takes_attachments_through_a_signed_put(
    alice, catalog, settings, tmp_path
):
    settings.STORAGES = {
        **settings.STORAGES,
        "artifacts": {
            "BACKEND": "core.storage.SignedFileSystemStorage",
            "OPTIONS": {"location": tmp_path, "base_url": "/files/artifacts/"},
        },
    }
    sub = submit(alice, catalog.yaml()).json()["id"]
    content = b"0123456789"
    grant = alice.post(
        f"/api/v1/submissions/{sub}/attachments/",
        {"name": "n.txt", "size": 10, "sha256": hashlib.sha256(content).hexdigest()},
        format="json",
    ).json()
    assert grant["method"] == "PUT"
    from rest_framework.test import APIClient

    anonymous = APIClient()
    forged = grant["url"][:-2] + ("B" if grant["url"][-2] == "A" else "A") + "/"
    assert anonymous.put(forged, content, content_type="text/plain").status_code == 403
    assert anonymous.put(grant["url"], content, content_type="text/plain").status_code == 204
    assert anonymous.put(grant["url"], content, content_type="text/plain").status_code == 409
    verify = alice.post(
        f"/api/v1/submissions/{sub}/attachments/{grant['attachment']['id']}/verify/"
    )
    assert verify.status_code == 200
    assert (
        storages["artifacts"]
        .open(Artifact.objects.get(pk=grant["attachment"]["id"]).storage_key)
        .read()
        == content
    )


def test_submissions_are_throttled_per_organization(alice, catalog, cast, monkeypatch):
    monkeypatch.setattr(VendorSubmitThrottle, "THROTTLE_RATES", {"vendor_submit": "2/hour"})
    codes = [submit(alice, catalog.yaml(notes=str(i))).status_code for i in range(3)]
    assert codes == [201, 201, 429]
    assert submit(token_client(cast.org_b), catalog.yaml()).status_code == 201
    assert alice.get("/api/v1/submissions/").status_code == 200  # reads are not the submit quota


def test_the_vendor_api_openapi_schema_generates_without_warnings():
    GENERATOR_STATS.reset()
    # Only the vendor API's own routes: other APIs answer for their own warnings.
    patterns = [path("api/v1/", include("portal.api.urls"))]
    schema = SchemaGenerator(patterns=patterns).get_schema(request=None, public=True)
    assert not GENERATOR_STATS._warn_cache, list(GENERATOR_STATS._warn_cache)
    assert not GENERATOR_STATS._error_cache, list(GENERATOR_STATS._error_cache)
    paths = schema["paths"]
    assert "/api/v1/submissions/" in paths and "/api/v1/runs/{id}/raw-records/" in paths
    assert "vendorToken" in schema["components"]["securitySchemes"]


def test_the_openapi_schema_and_swagger_ui_are_served_from_local_static_files(client):
    schema = client.get("/api/schema/?format=json")
    assert (
        schema.status_code == 200 and "/api/v1/submissions/" in json.loads(schema.content)["paths"]
    )
    page = client.get("/api/docs/").content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in page
    assert "cdn" not in page.lower()


def _multipart_post(url: str, fields: dict, content: bytes) -> int:
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        )
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n'
        f"Content-Type: {fields.get('Content-Type', 'application/octet-stream')}\r\n\r\n".encode()
        + content
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    request = urllib.request.Request(
        url,
        data=b"".join(parts),
        method="POST",
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_an_org_member_is_needed_for_each_org(cast, catalog):
    other = make_org()
    assert submit(token_client(other), catalog.yaml()).status_code == 201
    assert Submission.objects.filter(org=cast.org_a).count() == 0
