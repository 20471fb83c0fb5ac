"""Who is calling: the vendor organization behind a token or a portal session."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from django.core.cache import cache
from rest_framework import exceptions, permissions, throttling
from rest_framework.request import Request

from submissions.auth import TokenPrincipal
from submissions.models import ApiToken, Organization

ORG_HEADER = "HTTP_X_ORG"


def request_org(request: Request) -> Organization | None:
    """The organization the request acts for, or None (anonymous, or no membership).

    A token belongs to one org. A session user acts for their only org, or, when they
    belong to several, for the one named by slug in the `X-Org` header.
    """
    cached = getattr(request, "_vendor_org", False)
    if cached is not False:
        return cached
    user = request.user
    org: Organization | None = None
    if isinstance(user, TokenPrincipal):
        org = user.org
    elif user is not None and user.is_authenticated:
        orgs = Organization.objects.filter(memberships__user=user).order_by("pk")
        wanted = request.META.get(ORG_HEADER, "").strip()
        if wanted:
            org = orgs.filter(slug=wanted).first()
        else:
            candidates = list(orgs[:2])
            org = candidates[0] if len(candidates) == 1 else None
    request._vendor_org = org
    return org


class IsVendor(permissions.BasePermission):
    """An authenticated member (or token) of a vendor organization; writes need `submit`."""

    message = "This endpoint is for members of a vendor organization."

    def has_permission(self, request: Request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            raise exceptions.NotAuthenticated()
        if request_org(request) is None:
            return False
        if request.method not in permissions.SAFE_METHODS and isinstance(
            request.user, TokenPrincipal
        ):
            if ApiToken.SCOPE_SUBMIT not in (request.user.token.scopes or []):
                self.message = "This token lacks the 'submit' scope."
                return False
        return True


LOCK_WAIT_S = 2.0
LOCK_EXPIRES_S = 5


@contextmanager
def _counting(key: str) -> Iterator[None]:
    """One web process at a time reads and writes `key`'s request history (DRF's throttle
    reads it, then writes it back: two workers at once would count two requests as one).
    The lock is a cache add(), atomic in Redis and in the database cache, held for
    milliseconds; a lock nobody releases expires, and a caller never waits past
    LOCK_WAIT_S (docs/security.md "Shared state across processes")."""
    lock, token = f"{key}:lock", uuid.uuid4().hex
    deadline = time.monotonic() + LOCK_WAIT_S
    held = cache.add(lock, token, timeout=LOCK_EXPIRES_S)
    while not held and time.monotonic() < deadline:
        time.sleep(0.005)
        held = cache.add(lock, token, timeout=LOCK_EXPIRES_S)
    try:
        yield
    finally:
        if held and cache.get(lock) == token:
            cache.delete(lock)


class _OrgThrottle(throttling.SimpleRateThrottle):
    """Counts per organization (tokens carry no user id), else per user or client address;
    the count is shared by every web process and updated by one at a time."""

    def allow_request(self, request: Request, view) -> bool:
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        with _counting(key):
            return super().allow_request(request, view)

    def get_cache_key(self, request: Request, view) -> str | None:
        org = request_org(request)
        if org is not None:
            ident = f"org-{org.pk}"
        elif request.user and request.user.is_authenticated and request.user.pk:
            ident = f"user-{request.user.pk}"
        else:
            ident = f"addr-{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class VendorThrottle(_OrgThrottle):
    scope = "vendor"


class VendorSubmitThrottle(_OrgThrottle):
    scope = "vendor_submit"

    def allow_request(self, request: Request, view) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return True
        return super().allow_request(request, view)


def submit_allowed(request, org: Organization) -> float | None:
    """Count one submit by `org` from a page (the portal's submit form, a ladder form) in
    the API's own `vendor_submit` bucket: the same cache key, the same rate and lock, so
    the portal and the API share one budget across every web process (docs/security.md
    "Throttles"). None when allowed; otherwise the seconds to wait."""
    throttle = VendorSubmitThrottle()
    request._vendor_org = org  # request_org's answer: the form's organization
    if throttle.allow_request(request, None):
        return None
    return max(1.0, throttle.wait() or 1.0)
