"""Filesystem storage for the embedded profile, with expiring signed URLs like S3's."""

from __future__ import annotations

import time

from django.core import signing
from django.core.files.storage import FileSystemStorage
from django.urls import reverse

_SALT = "agentperf.files"


class SignedFileSystemStorage(FileSystemStorage):
    """Serves files only through `/files/<alias>/?t=<signed token>` links that expire."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.alias = str(self.base_url).strip("/").split("/")[-1]

    def url(self, name: str | None, expire: int = 900) -> str:
        expires = int(time.time()) + expire
        token = signing.Signer(salt=_SALT).sign_object({"a": self.alias, "e": expires, "n": name})
        return reverse("signed-file", kwargs={"alias": self.alias}) + f"?t={token}"


def unsign_file_token(token: str, alias: str) -> str:
    """The storage key a token grants, or BadSignature when forged, expired or misdirected."""
    data = signing.Signer(salt=_SALT).unsign_object(token)
    if data.get("a") != alias:
        raise signing.BadSignature("token is for another storage")
    if int(data.get("e", 0)) < time.time():
        raise signing.BadSignature("link expired")
    return str(data["n"])
