"""Absolute links to this site, for readers that need them: Open Graph tags, /llms.txt,
the embed's attribution link and the images' footers (docs/api.md "Embeds").

`PUBLIC_BASE_URL` (scheme://host[:port], no path) names the public address; without it,
the address the request came in on. A request with no host at all (the background page
rebuild's, `leaderboard.rebuild`) gets the path alone rather than an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest


def public_base() -> str:
    return settings.PUBLIC_BASE_URL.rstrip("/")


def mcp_url() -> str:
    """Where this deployment serves the MCP server (`PUBLIC_MCP_URL`, docs/api.md "MCP");
    empty when it does not say."""
    return settings.PUBLIC_MCP_URL


# While a page is rendered for the page cache (leaderboard.rendering.render_page), an absolute
# link is written as this marker + the path when PUBLIC_BASE_URL is unset: the cached HTML
# is the same for every reader, and each response puts its own reader's origin in
# (`with_origin`), so one reader's Host or scheme never reaches another's page.
ORIGIN_MARKER = "\x00origin\x00"
_deferred: ContextVar[bool] = ContextVar("links_deferred", default=False)


@contextmanager
def origin_deferred() -> Iterator[None]:
    token = _deferred.set(True)
    try:
        yield
    finally:
        _deferred.reset(token)


def with_origin(html: str, request: HttpRequest | None) -> str:
    """`html` with each ORIGIN_MARKER replaced by this request's origin (empty without one:
    the path alone, as `absolute` gives)."""
    if ORIGIN_MARKER not in html:
        return html
    return html.replace(ORIGIN_MARKER, absolute(request, "/").removesuffix("/"))


def absolute(request: HttpRequest | None, path: str) -> str:
    base = public_base()
    if not base and _deferred.get():
        return ORIGIN_MARKER + path
    if base:
        return base + path
    if request is not None and ("HTTP_HOST" in request.META or "SERVER_NAME" in request.META):
        try:
            return request.build_absolute_uri(path)
        except DisallowedHost:
            pass
    return path


def cache_scope(request: HttpRequest) -> str:
    """What a cached answer holding absolute links depends on besides its path."""
    base = public_base()
    if base:
        return base
    try:
        return f"{request.scheme}://{request.get_host()}"
    except (DisallowedHost, KeyError):
        return "-"
