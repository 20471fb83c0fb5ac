"""Storing and reading artifacts through the `artifacts` storage (filesystem or S3)."""

from __future__ import annotations

import hashlib

from django.core.files.base import ContentFile
from django.core.files.storage import storages

from submissions.models import Artifact


class ArtifactIntegrityError(Exception):
    """Stored bytes no longer match the recorded sha256."""


def artifact_storage():
    return storages["artifacts"]


def artifact_store(
    *,
    kind: str,
    key: str,
    content: bytes,
    content_type: str = "application/octet-stream",
    org=None,
    run=None,
) -> Artifact:
    """Write `content` under `key` and record its sha256 and size. Idempotent per key."""
    digest = hashlib.sha256(content).hexdigest()
    existing = Artifact.objects.filter(storage_key=key).first()
    if existing is not None:
        if existing.sha256 != digest:
            raise ArtifactIntegrityError(f"{key} already stored with other content")
        return existing
    storage = artifact_storage()
    saved_name = storage.save(key, ContentFile(content))
    if saved_name != key:
        storage.delete(saved_name)
        raise ArtifactIntegrityError(f"{key} already exists in storage")
    return Artifact.objects.create(
        kind=kind,
        storage_key=key,
        sha256=digest,
        size=len(content),
        content_type=content_type,
        org=org,
        run=run,
    )


def artifact_read(*, artifact: Artifact) -> bytes:
    """The artifact's bytes, checked against the recorded sha256."""
    with artifact_storage().open(artifact.storage_key, "rb") as handle:
        data = handle.read()
    if hashlib.sha256(data).hexdigest() != artifact.sha256:
        raise ArtifactIntegrityError(f"{artifact.storage_key}: sha256 mismatch")
    return data


def artifact_url(*, artifact: Artifact, expire: int = 900) -> str:
    """A presigned (S3) or signed (filesystem) GET link that expires."""
    return artifact_storage().url(artifact.storage_key, expire=expire)
