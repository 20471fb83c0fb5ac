"""Attachment uploads straight to storage: a presigned S3 POST, or a signed upload URL on
the filesystem profile. The bytes never pass through a web worker on S3."""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core import signing
from django.core.files.base import File
from django.urls import reverse
from django.utils import timezone

from submissions import constants as c
from submissions.models import Artifact, Submission
from submissions.services.artifacts import artifact_storage

UPLOAD_SALT = "agentperf.attachment-upload"
UPLOAD_EXPIRES_S = 900
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class AttachmentError(Exception):
    """An upload that cannot be granted or confirmed; `field` names the input at fault."""

    def __init__(self, message: str, *, field: str = "non_field_errors", status: int = 400):
        super().__init__(message)
        self.field = field
        self.status = status


@dataclass(slots=True)
class UploadGrant:
    artifact: Artifact
    method: str  # "POST" (form fields + file) or "PUT" (raw body)
    url: str
    fields: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    expires_in: int = UPLOAD_EXPIRES_S


def _is_s3(storage: Any) -> bool:
    return hasattr(storage, "bucket_name") and hasattr(storage, "connection")


def attachment_presign(
    *, submission: Submission, name: str, size: int, sha256: str, content_type: str
) -> UploadGrant:
    """Record an attachment of `size` bytes and grant one upload of exactly those bytes."""
    limit = int(settings.MAX_ATTACHMENT_BYTES)
    if size > limit:
        raise AttachmentError(
            f"{size} bytes is over the {limit}-byte limit", field="size", status=413
        )
    if submission.status in c.FINAL_STATES:
        raise AttachmentError(
            f"submission #{submission.pk} is {submission.status}; it takes no attachments",
            status=409,
        )
    safe = _SAFE_NAME.sub("_", name).strip("._")[:120] or "attachment"
    key = f"attachments/org-{submission.org_id}/sub-{submission.pk}/{uuid.uuid4().hex}/{safe}"
    artifact = Artifact.objects.create(
        kind=Artifact.KIND_ATTACHMENT,
        storage_key=key,
        sha256=sha256.lower(),
        size=size,
        content_type=content_type,
        org=submission.org,
        submission=submission,
        name=name[:200],
    )
    storage = artifact_storage()
    if _is_s3(storage):
        client = storage.connection.meta.client
        post = client.generate_presigned_post(
            Bucket=storage.bucket_name,
            Key=key,
            Fields={"Content-Type": content_type},
            Conditions=[["content-length-range", size, size], {"Content-Type": content_type}],
            ExpiresIn=UPLOAD_EXPIRES_S,
        )
        return UploadGrant(artifact=artifact, method="POST", url=post["url"], fields=post["fields"])
    token = signing.dumps(
        {"a": artifact.pk, "k": key, "s": size, "e": int(time.time()) + UPLOAD_EXPIRES_S},
        salt=UPLOAD_SALT,
    )
    url = reverse("vendor-api:signed-upload", kwargs={"token": token})
    return UploadGrant(
        artifact=artifact, method="PUT", url=url, headers={"Content-Type": content_type}
    )


def attachment_receive(*, token: str, stream: Any, content_length: int | None) -> Artifact:
    """Store the body of a signed filesystem upload (once, at most the granted size)."""
    try:
        grant = signing.loads(token, salt=UPLOAD_SALT)
    except signing.BadSignature:
        raise AttachmentError("invalid upload link", status=403) from None
    if int(grant["e"]) < time.time():
        raise AttachmentError("upload link expired", status=403)
    artifact = Artifact.objects.filter(pk=grant["a"], storage_key=grant["k"]).first()
    if artifact is None:
        raise AttachmentError("no such upload", status=404)
    if content_length is not None and content_length != artifact.size:
        raise AttachmentError(
            f"body is {content_length} bytes; {artifact.size} were declared", status=400
        )
    storage = artifact_storage()
    if storage.exists(artifact.storage_key):
        raise AttachmentError("already uploaded", status=409)
    import tempfile

    with tempfile.TemporaryFile() as tmp:
        total = 0
        while True:
            chunk = stream.read(1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > artifact.size:
                raise AttachmentError("body longer than declared", status=400)
            tmp.write(chunk)
        tmp.seek(0)
        storage.save(artifact.storage_key, File(tmp))
    return artifact


def attachment_verify(*, artifact: Artifact) -> Artifact:
    """Check the uploaded bytes against the declared size and sha256; mark it verified."""
    storage = artifact_storage()
    if not storage.exists(artifact.storage_key):
        raise AttachmentError("nothing has been uploaded yet", status=409)
    digest = hashlib.sha256()
    size = 0
    with storage.open(artifact.storage_key, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
    if size != artifact.size or digest.hexdigest() != artifact.sha256:
        storage.delete(artifact.storage_key)
        raise AttachmentError(
            "the uploaded bytes do not match the declared size and sha256; upload again",
            status=409,
        )
    if artifact.verified_at is None:
        artifact.verified_at = timezone.now()
        artifact.save(update_fields=["verified_at"])
    return artifact
