"""Upload requests and shard reports cross the runner API as contract documents
(agentperf/contract.py ``UploadRequest``, ``ShardReport``; docs/pipeline.md "The contract"):
an unknown field or a number in another type is a 400 naming the field, an upload larger
than the limit or a body larger than the JSON limit is a 413, and nothing is stored."""

from __future__ import annotations

import gzip
import hashlib

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import storages
from django.test import override_settings

from runs.services import shard_key
from tests.pipeline.builders import prepared_run
from tests.pipeline.test_runner_api import _started

pytestmark = pytest.mark.django_db

UPLOAD = {"kind": "shard_records", "sha256": "a" * 64, "size": 10, "trial_id": "t0a1", "shard": 0}


@pytest.fixture
def started(catalog, cast):
    run, token = prepared_run(cast.org_a)
    client = _started(run, token)
    run.refresh_from_db()  # the attempt start gave it, which names the shard keys
    return run, client


def _refused(response, status: int = 400) -> dict[str, list[str]]:
    assert response.status_code == status, response.content[:500]
    return response.json()["error"]["fields"]


def _report(shard: int) -> dict:
    """A shard's report as the engine writes it (agentperf/engine/sharding.py ``_report``;
    agentperf/documents/shards.py ``ShardRunReport``)."""
    offset = {"offset_ns": 0, "uncertainty_ns": 20_000, "probes": 8}
    return {
        "shard": shard,
        "shards": 2,
        "agents": 2,
        "records": 1,
        "host": "lg1",
        "boot_id": None,
        "pid": 4242,
        "cpus": [0],
        "health": {"loop_lag_p99_ms": 1.5, "cpu_percent": 12.0, "stamp_delay_p99_ms": 0.1},
        "cpu_s": 0.5,
        "peak_rss_mib": 80.0,
        "clock": {"start": offset, "end": offset},
        "window": {"start_ns": 1_000, "end_ns": 2_000},
    }


def _shard(run, *, trial_id: str = "t0a1", shard: int = 0) -> dict:
    """A shard's records stored where its upload grant names them, and its report."""
    body = gzip.compress(b'{"request_id": "r0"}\n', mtime=0)
    key = shard_key(run, trial_id, shard)
    storage = storages["artifacts"]
    if storage.exists(key):
        storage.delete(key)
    storage.save(key, ContentFile(body))
    return {
        "trial_id": trial_id,
        "shard": shard,
        "report": _report(shard),
        "sha256": hashlib.sha256(body).hexdigest(),
        "size": len(body),
    }


@override_settings(RUNNER_API_BASE_URL="http://testserver")
def test_a_shard_upload_request_and_its_report_round_trip(started):
    run, client = started
    grant = client.post(f"/api/v1/runner/runs/{run.pk}/uploads", UPLOAD, format="json")
    assert grant.status_code == 200, grant.content[:500]
    assert grant.json()["key"] == shard_key(run, "t0a1", 0)
    assert grant.json()["upload"]["size"] == 10
    report = _shard(run)
    posted = client.post(f"/api/v1/runner/runs/{run.pk}/shards", report, format="json")
    assert posted.status_code == 201, posted.content[:500]
    listed = client.get(f"/api/v1/runner/runs/{run.pk}/shards?trial_id=t0a1&shards=2").json()
    [stored] = listed["shards"]
    assert {k: stored[k] for k in report} == report
    assert stored["key"] == shard_key(run, "t0a1", 0)


@pytest.mark.parametrize(
    ("field", "value"),
    [("size", "10"), ("size", 10.0), ("shard", "0"), ("shard", 0.0), ("trial_index", True)],
)
def test_an_upload_request_with_a_number_of_another_type_is_refused_naming_it(
    started, field, value
):
    run, client = started
    body = {**UPLOAD, field: value}
    fields = _refused(client.post(f"/api/v1/runner/runs/{run.pk}/uploads", body, format="json"))
    assert list(fields) == [field]


def test_an_upload_request_with_an_unknown_field_is_refused_naming_it(started):
    run, client = started
    body = {**UPLOAD, "bucket": "elsewhere"}
    fields = _refused(client.post(f"/api/v1/runner/runs/{run.pk}/uploads", body, format="json"))
    assert fields == {"bucket": ["unknown field"]}


@override_settings(RUN_UPLOAD_MAX_BYTES=1000)
def test_an_upload_larger_than_the_limit_is_a_413_naming_the_size(started):
    run, client = started
    body = {**UPLOAD, "size": 1001}
    response = client.post(f"/api/v1/runner/runs/{run.pk}/uploads", body, format="json")
    assert _refused(response, 413) == {"size": ["larger than 1000 bytes"]}
    assert response.json()["error"]["code"] == "too_large"


@pytest.mark.parametrize(
    ("field", "value"),
    [("size", "10"), ("size", 10.0), ("shard", "0"), ("sha256", 7), ("report", [])],
)
def test_a_shard_report_of_another_type_is_refused_naming_it_and_not_stored(started, field, value):
    run, client = started
    body = {**_shard(run), field: value}
    fields = _refused(client.post(f"/api/v1/runner/runs/{run.pk}/shards", body, format="json"))
    assert list(fields) == [field]
    report_key = shard_key(run, "t0a1", 0, ".report.json")
    assert not storages["artifacts"].exists(report_key)


def test_a_shard_report_with_an_unknown_field_is_refused_naming_it(started):
    run, client = started
    body = {**_shard(run), "host": "lg1"}
    fields = _refused(client.post(f"/api/v1/runner/runs/{run.pk}/shards", body, format="json"))
    assert fields == {"host": ["unknown field"]}


@override_settings(MAX_JSON_BODY_BYTES=2048)
@pytest.mark.parametrize("path", ["uploads", "shards"])
def test_a_body_larger_than_the_json_limit_is_a_413(started, path):
    run, client = started
    body = {**_shard(run), "report": {"padding": "x" * 4096}}
    response = client.post(f"/api/v1/runner/runs/{run.pk}/{path}", body, format="json")
    assert response.status_code == 413, response.content[:500]
    assert response.json()["error"]["code"] == "too_large"


def test_a_filesystem_grant_takes_only_the_bytes_it_was_asked_for(started, settings, tmp_path):
    """The hostile finding: a grant accepted a second PUT of other bytes (same size) whose
    SHA-256 was not the upload request's; the embedded profile's signed PUT now carries the
    SHA-256 and refuses them, keeping the file stored first. (S3's presigned PUT signs the
    Content-Length; the stored object's SHA-256 is checked when the report naming it is
    posted: runs/services.py _stored_matches.)"""
    settings.RUNNER_API_BASE_URL = "http://testserver"
    settings.STORAGES = {
        **settings.STORAGES,
        "artifacts": {
            "BACKEND": "core.storage.SignedFileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "artifacts"), "base_url": "/files/artifacts/"},
        },
    }
    run, client = started
    good = gzip.compress(b'{"request_id": "r0"}\n', mtime=0)
    other = bytes(b ^ 0xFF for b in good)
    request = {**UPLOAD, "sha256": hashlib.sha256(good).hexdigest(), "size": len(good)}
    answer = client.post(f"/api/v1/runner/runs/{run.pk}/uploads", request, format="json")
    assert answer.status_code == 200, answer.content[:500]
    key, url = answer.json()["key"], answer.json()["upload"]["url"]
    path = url.removeprefix("http://testserver")

    def put(body: bytes):
        return client.generic("PUT", path, body, content_type="application/gzip")

    assert put(good).status_code == 200
    fields = _refused(put(other))
    assert "SHA-256" in " ".join(fields["non_field_errors"])
    assert storages["artifacts"].open(key).read() == good
