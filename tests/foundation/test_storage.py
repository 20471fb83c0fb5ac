import hashlib
import os
import urllib.error
import urllib.request

import pytest
from django.conf import settings
from django.test import override_settings

from submissions.models import Artifact
from submissions.services.artifacts import (
    ArtifactIntegrityError,
    artifact_read,
    artifact_storage,
    artifact_store,
    artifact_url,
)

PAYLOAD = b'{"request_id": "r1", "ttft_ms": 12.5}\n' * 100


def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def _absolute(url: str, live_server) -> str:
    return url if url.startswith("http") else live_server.url + url


def _round_trip(live_server, key: str) -> Artifact:
    artifact = artifact_store(
        kind=Artifact.KIND_RAW_RECORDS,
        key=key,
        content=PAYLOAD,
        content_type="application/x-ndjson",
    )
    assert artifact.sha256 == hashlib.sha256(PAYLOAD).hexdigest()
    assert artifact.size == len(PAYLOAD)
    assert artifact_read(artifact=artifact) == PAYLOAD
    assert _fetch(_absolute(artifact_url(artifact=artifact, expire=60), live_server)) == PAYLOAD
    return artifact


@pytest.mark.django_db
def test_s3_profile_puts_gets_and_serves_a_presigned_link(live_server):
    assert settings.STORAGE_PROFILE == "s3", "make test runs with SeaweedFS; S3_ENDPOINT_URL unset"
    from storages.backends.s3 import S3Storage

    assert isinstance(artifact_storage(), S3Storage)
    artifact = _round_trip(live_server, f"tests/{os.getpid()}/records.jsonl")
    url = artifact_url(artifact=artifact)
    assert url.startswith(os.environ["S3_ENDPOINT_URL"]) and "X-Amz-Signature" in url
    # The object really is in the bucket, read through boto3 directly.
    client = artifact_storage().connection.meta.client
    body = client.get_object(
        Bucket=settings.STORAGES["artifacts"]["OPTIONS"]["bucket_name"], Key=artifact.storage_key
    )["Body"].read()
    assert body == PAYLOAD


@pytest.mark.django_db
def test_filesystem_profile_passes_the_same_code_path(live_server, tmp_path):
    fs = {
        "BACKEND": "core.storage.SignedFileSystemStorage",
        "OPTIONS": {"location": tmp_path, "base_url": "/files/artifacts/"},
    }
    with override_settings(STORAGES={**settings.STORAGES, "artifacts": fs}):
        artifact = _round_trip(live_server, "tests/records.jsonl")
        assert (tmp_path / "tests" / "records.jsonl").read_bytes() == PAYLOAD
        forged = artifact_url(artifact=artifact).replace("t=", "t=x")
        with pytest.raises(urllib.error.HTTPError) as err:
            _fetch(live_server.url + forged)
        assert err.value.code == 404


@pytest.mark.django_db
def test_tampered_bytes_fail_the_sha256_check(tmp_path):
    fs = {
        "BACKEND": "core.storage.SignedFileSystemStorage",
        "OPTIONS": {"location": tmp_path, "base_url": "/files/artifacts/"},
    }
    with override_settings(STORAGES={**settings.STORAGES, "artifacts": fs}):
        artifact = artifact_store(kind=Artifact.KIND_LOG, key="logs/a.txt", content=b"hello")
        (tmp_path / "logs" / "a.txt").write_bytes(b"hellO")
        with pytest.raises(ArtifactIntegrityError, match="sha256 mismatch"):
            artifact_read(artifact=artifact)


@pytest.mark.django_db
def test_storing_other_content_under_an_existing_key_is_refused():
    key = f"tests/{os.getpid()}/twice.txt"
    artifact_store(kind=Artifact.KIND_LOG, key=key, content=b"one")
    assert artifact_store(kind=Artifact.KIND_LOG, key=key, content=b"one").storage_key == key
    with pytest.raises(ArtifactIntegrityError, match="other content"):
        artifact_store(kind=Artifact.KIND_LOG, key=key, content=b"two")
