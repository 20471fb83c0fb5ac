"""Who is calling: the vendor organization behind a token or a portal session."""

from __future__ import annotations

from rest_framework import exceptions, permissions, throttling
from rest_framework.request import Request

from core.throttles import CountedThrottleMixin
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


class _OrgThrottle(CountedThrottleMixin, throttling.SimpleRateThrottle):
    """Counts per organization (tokens carry no user id), else per user or client address;
    the count is shared by every web process and updated by one at a time."""

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
