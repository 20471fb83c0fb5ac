"""The login throttle's backend (docs/security.md "Login").

django-axes counts failed logins per account and per address and refuses a locked-out one
before any password is checked. Every login page of the site (the portal's, the review
console's and the admin's) authenticates with the request, which axes needs to know the
address. A call without a request (Django's test client `login()`, a management command)
is not a login page: axes' own backend raises on it; this one leaves it to the next backend,
so the page logins are throttled and nothing else changes."""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend


class AxesBackend(AxesStandaloneBackend):
    def authenticate(self, request: Any, username: str | None = None, **kwargs: Any) -> None:
        if request is None:
            return None
        return super().authenticate(request, username=username, **kwargs)


def client_address(request: Any) -> str | None:
    """The address the login throttle counts: REMOTE_ADDR, or behind TRUSTED_PROXY_COUNT
    proxies that each append the address they saw to X-Forwarded-For (Varnish does), the
    entry the outermost trusted proxy appended. Entries left of it are the client's own
    claims and never count; with fewer entries than proxies, REMOTE_ADDR."""
    from django.conf import settings

    remote = request.META.get("REMOTE_ADDR")
    count = settings.TRUSTED_PROXY_COUNT
    if count <= 0:
        return remote
    hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    hops = [h for h in hops if h]
    return hops[-count] if len(hops) >= count else remote
