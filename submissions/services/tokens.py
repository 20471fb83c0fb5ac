"""Vendor API tokens: `apf_<prefix>_<secret>`; only a SHA-256 of the whole token is stored."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime

from django.utils import timezone

from submissions.models import ApiToken, Organization

TOKEN_PREFIX = "apf"


class TokenError(Exception):
    """A token that is malformed, unknown, revoked or expired (the message says which)."""


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def api_token_create(
    *,
    org: Organization,
    name: str,
    scopes: tuple[str, ...] = ApiToken.ALL_SCOPES,
    expires_at: datetime | None = None,
    created_by=None,
) -> tuple[ApiToken, str]:
    """Create a token; returns the row and the plaintext, which is never stored."""
    unknown = set(scopes) - set(ApiToken.ALL_SCOPES)
    if unknown:
        raise ValueError(f"unknown scopes: {sorted(unknown)}")
    prefix = secrets.token_hex(6)
    plaintext = f"{TOKEN_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    token = ApiToken.objects.create(
        org=org,
        name=name,
        prefix=prefix,
        secret_hash=_hash(plaintext),
        scopes=list(scopes),
        expires_at=expires_at,
        created_by=created_by,
    )
    return token, plaintext


def api_token_verify(plaintext: str, *, touch: bool = True) -> ApiToken:
    """The token row for `plaintext`, compared in constant time; TokenError otherwise."""
    parts = plaintext.split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not parts[1] or not parts[2]:
        raise TokenError("malformed token")
    token = ApiToken.objects.select_related("org").filter(prefix=parts[1]).first()
    # Compare against a dummy hash when the prefix is unknown so timing does not reveal it.
    expected = token.secret_hash if token else _hash("dummy")
    if not hmac.compare_digest(expected, _hash(plaintext)) or token is None:
        raise TokenError("invalid token")
    now = timezone.now()
    if token.revoked_at is not None:
        raise TokenError("token revoked")
    if token.expires_at is not None and token.expires_at <= now:
        raise TokenError("token expired")
    if touch:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def api_token_revoke(*, token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token
