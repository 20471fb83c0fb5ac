"""HTTP caching of the public site: Cache-Control per kind, strong ETags, 304s, surrogate
keys for the reverse proxy, and a fast path that answers a repeated anonymous read from
the shared cache before sessions, CSRF, auth, the view and its renderer run
(docs/caching.md).

Every URL gets a cache class. A view is public only when it says so, by its URL name in
`POLICIES` or with the `cache_public` decorator; everything else (portal, review, vendor
API, runner API, admin, accounts, signed links, /health) answers `private, no-store`.

The fast path keys a finished response by the publish generation (`leaderboard.cache`)
and the request's path, query and representation, so a publish or a status change retires
every stored response at once; a process also keeps the last responses it served in
memory under the same key (the generation is still read from the shared cache on every
request, so no process serves a retired page). A response built from a page served stale
during the grace after a publish (`leaderboard.cache.cached_page`) is never stored.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseNotModified

from leaderboard import cache as page_cache
from leaderboard import links

PRIVATE = "private, no-store"
KeysFn = Callable[[HttpRequest, dict[str, Any]], Iterable[str]]


@dataclass(frozen=True)
class Kind:
    """How long a browser (`max_age`) and a shared cache (`s_maxage`) keep an answer, and
    how long a shared cache may serve it stale while it refetches (`swr`). Proxies hold
    purged kinds for a day: a publish or a status change purges them by key."""

    name: str
    max_age: int
    s_maxage: int
    swr: int

    def header(self) -> str:
        return (
            f"public, max-age={self.max_age}, s-maxage={self.s_maxage}, "
            f"stale-while-revalidate={self.swr}"
        )


PAGE = Kind("page", max_age=60, s_maxage=86400, swr=60)
API = Kind("api", max_age=60, s_maxage=86400, swr=60)
CSV = Kind("csv", max_age=300, s_maxage=86400, swr=300)
# the data page and a redirect to a dump file's signed link (valid 900 s)
DUMP = Kind("dump", max_age=60, s_maxage=300, swr=0)
# a redirect to a raw-records signed link (valid 300 s)
LINK = Kind("link", max_age=30, s_maxage=120, swr=0)
# chart images, schemas and API docs: change only with a deploy or a publish (purged)
ASSET = Kind("asset", max_age=3600, s_maxage=86400, swr=86400)
KINDS = {k.name: k for k in (PAGE, API, CSV, DUMP, LINK, ASSET)}


@dataclass(frozen=True)
class Policy:
    kind: Kind
    keys: KeysFn = field(default=lambda request, kwargs: ())
    # True when the view's output is a function of the publish generation and the request
    # only (the fast path may store it under the generation)
    memo: bool = True


def _fixed(*keys: str) -> KeysFn:
    return lambda request, kwargs: keys


def _kw(fmt: str, *names: str) -> KeysFn:
    return lambda request, kwargs: (fmt.format(*(kwargs[n] for n in names)),)


# Every page that shows catalog data (names, specs, tiers) carries "catalog": a catalog
# change, rare, purges them all; the other keys follow what a publish changes.
def _result(request: HttpRequest, kwargs: dict[str, Any]) -> list[str]:
    return [f"result:{kwargs['pk']}", "catalog"]


def _compared(request: HttpRequest, kwargs: dict[str, Any]) -> list[str]:
    ids: list[int] = []
    for raw in request.GET.getlist("r"):
        ids += [int(p) for p in raw.split(",") if p.strip().isdigit()]
    return [*(f"result:{pk}" for pk in dict.fromkeys(ids[:8])), "catalog"]


def _model(request: HttpRequest, kwargs: dict[str, Any]) -> list[str]:
    return [f"model:{kwargs['slug']}", "catalog"]


def _hardware(request: HttpRequest, kwargs: dict[str, Any]) -> list[str]:
    return [f"hardware:{kwargs['slug']}", "catalog"]


def _history(request: HttpRequest, kwargs: dict[str, Any]) -> list[str]:
    return [f"pair:{kwargs['model_slug']}:{kwargs['hardware_slug']}", "catalog"]


def _ladder(request: HttpRequest, kwargs: dict[str, Any]) -> list[str]:
    return [f"ladder:{kwargs['pk']}", "catalog"]


# URL name -> policy. A name not here (and a view not decorated) is private.
POLICIES: dict[str, Policy] = {
    # pages (leaderboard/urls.py)
    "home": Policy(PAGE, _fixed("index", "catalog")),
    "model-list": Policy(PAGE, _fixed("index", "catalog")),
    "model-detail": Policy(PAGE, _model),
    "hardware-list": Policy(PAGE, _fixed("index", "catalog")),
    "hardware-detail": Policy(PAGE, _hardware),
    "result-detail": Policy(PAGE, _result),
    "result-raw-data": Policy(LINK, _kw("result:{}", "pk"), memo=False),
    "compare": Policy(PAGE, _compared),
    "history": Policy(PAGE, _history),
    "methodology": Policy(PAGE, _fixed("methodology", "catalog")),
    "twin-accuracy": Policy(PAGE, _fixed("twin-accuracy")),
    "data": Policy(DUMP, _fixed("dump"), memo=False),
    "data-file": Policy(DUMP, _fixed("dump"), memo=False),
    # public read API (leaderboard/api_urls.py)
    "public-api-models": Policy(API, _fixed("index", "catalog")),
    "public-api-model": Policy(API, _model),
    "public-api-hardware-list": Policy(API, _fixed("index", "catalog")),
    "public-api-hardware": Policy(API, _hardware),
    "public-api-results": Policy(API, _fixed("index", "catalog")),
    "public-api-result": Policy(API, _result),
    "public-api-result-timeline": Policy(API, _kw("result:{}", "pk")),
    "public-api-compare": Policy(API, _compared),
    "public-api-twin-accuracy": Policy(API, _fixed("twin-accuracy")),
    # ladders (ladders/urls.py): not built per generation, so never stored by the fast
    # path; the proxy keeps them until a ladder publish purges them
    "ladder-list": Policy(PAGE, _fixed("ladders", "catalog"), memo=False),
    "ladder-detail": Policy(PAGE, _ladder, memo=False),
    "ladder-csv": Policy(CSV, _ladder, memo=False),
    "public-api-ladders": Policy(API, _fixed("ladders", "catalog"), memo=False),
    "public-api-ladder": Policy(API, _ladder, memo=False),
    # (llms.txt and the embeds and chart images carry their own @cache_public, which wins
    # over this table: leaderboard/llms.py, leaderboard/embed.py)
    # the receipt signing keys (leaderboard/receipts.py): they change with a key rotation,
    # which is a file and a restart, not an event a purge follows; so the proxy keeps them
    # for minutes, not a day, or `agentperf verify` would refuse every new receipt
    "receipt-keys": Policy(DUMP, _fixed("keys"), memo=False),
    "public-api-receipt-keys": Policy(DUMP, _fixed("keys"), memo=False),
    "result-receipt-file": Policy(API, _result, memo=False),
    "public-api-result-receipt": Policy(API, _result, memo=False),
    # schemas: the same until the next deploy (the Swagger UI page sets a cookie: private)
    "ladder-schema": Policy(ASSET, _fixed("schema"), memo=False),
    "deployment-config-schema": Policy(ASSET, _fixed("schema"), memo=False),
    "api-schema": Policy(ASSET, _fixed("schema"), memo=False),
}


def cache_public(
    kind: str | Kind, keys: KeysFn | Iterable[str] = (), *, memo: bool = True
) -> Callable[[Callable], Callable]:
    """Mark a public, anonymous view cacheable (docs/caching.md "Adding a public view").

    `kind`: "page", "api", "csv", "dump", "link" or "asset" (or a `Kind`); `keys`: the
    surrogate keys its answer carries, fixed or `(request, url_kwargs) -> keys`; `memo`:
    whether its output depends on the publish generation and the request alone (then the
    fast path stores it). Works on a function view and on `SomeAPIView.as_view()`::

        @cache_public("page", lambda request, kw: [f"model:{kw['slug']}"])
        def embed_model(request, slug): ...
    """
    the_kind = KINDS[kind] if isinstance(kind, str) else kind
    keys_fn: KeysFn = keys if callable(keys) else _fixed(*keys)
    policy = Policy(the_kind, keys_fn, memo)

    def mark(view: Callable) -> Callable:
        view.http_cache = policy  # type: ignore[attr-defined]
        return view

    return mark


def policy_for(view: Callable, url_name: str | None) -> Policy | None:
    found = getattr(view, "http_cache", None)
    if found is None and hasattr(view, "view_class"):  # a DRF/Django class view
        found = getattr(view.view_class, "http_cache", None)
    if found is None and url_name:
        found = POLICIES.get(url_name)
    return found


# --- the fast path -------------------------------------------------------------------

MEMO_SIZE = 256  # responses per process
MEMO_MAX_BYTES = 2 * 1024 * 1024  # a bigger answer goes to the shared cache only
STORED_HEADERS = ("Content-Type", "Cache-Control", "ETag", "xkey", "Vary")


class _Memo:
    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[str, tuple] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: str) -> tuple | None:
        with self.lock:
            hit = self.items.get(key)
            if hit is not None:
                self.items.move_to_end(key)
            return hit

    def put(self, key: str, value: tuple) -> None:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


_memo = _Memo(MEMO_SIZE)


def representation(request: HttpRequest) -> str:
    """What the answer's bytes depend on besides the URL: DRF negotiates the browsable API
    for a browser's Accept and JSON for anything else (the proxy normalizes Accept to these
    two; deploy/varnish/agentperf.vcl)."""
    if not request.path.startswith("/api/"):
        return "-"
    return "html" if "text/html" in request.META.get("HTTP_ACCEPT", "") else "json"


def etag_for(body: bytes, generation: str) -> str:
    """Strong: the publish epoch and the digest of the exact bytes (a page served from the
    previous generation during the stale grace has other bytes, so another tag)."""
    epoch = hashlib.sha1(generation.encode(), usedforsecurity=False).hexdigest()[:8]
    digest = hashlib.sha1(body, usedforsecurity=False).hexdigest()[:20]
    return f'"{epoch}-{digest}"'


def _matches(request: HttpRequest, etag: str) -> bool:
    header = request.META.get("HTTP_IF_NONE_MATCH")
    if not header:
        return False
    if header.strip() == "*":
        return True
    tags = {t.strip().removeprefix("W/") for t in header.split(",")}
    return etag in tags


def _not_modified(headers: dict[str, str]) -> HttpResponseNotModified:
    response = HttpResponseNotModified()
    for name in ("Cache-Control", "ETag", "xkey", "Vary"):
        if name in headers:
            response[name] = headers[name]
    return response


def _replay(request: HttpRequest, entry: tuple) -> HttpResponseBase:
    status, headers, body = entry
    if _matches(request, headers["ETag"]):
        return _not_modified(headers)
    response = HttpResponse(body, status=status)
    for name, value in headers.items():
        response[name] = value
    return response


def _scope(request: HttpRequest) -> str | None:
    """The origin an answer's absolute links are built for (pages, llms.txt and embeds
    build them from the request when PUBLIC_BASE_URL is unset), part of the fast path's
    key; None for a Host that ALLOWED_HOSTS refuses, which never takes the fast path (the
    view's own 400 answers it)."""
    try:
        host = request.get_host()
    except DisallowedHost:
        return None
    return links.public_base() or f"{request.scheme}://{host}"


class HttpCacheMiddleware:
    """Cache-Control, ETag, 304 and surrogate keys on every response; the fast path for a
    repeated anonymous read (module docstring). Place it after WhiteNoise (static files
    keep WhiteNoise's headers) and before the session middleware (the fast path skips
    everything after it); middleware below it that adds headers (a CSP) is stored with
    the response, so it must not vary per request."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        page_cache.served_stale.set(False)
        key = None
        anonymous = settings.SESSION_COOKIE_NAME not in request.COOKIES
        scope = _scope(request) if request.method == "GET" and anonymous else None
        if scope is not None:
            generation = page_cache.generation()
            key = (
                "http:"
                + hashlib.sha1(
                    f"{generation}|{scope}|{representation(request)}|{request.get_full_path()}".encode(),
                    usedforsecurity=False,
                ).hexdigest()
            )
            entry = _memo.get(key)
            if entry is None:
                entry = cache.get(key)
                if entry is not None:
                    _memo.put(key, entry)
            if entry is not None:
                return _replay(request, entry)
            request._http_cache_generation = generation  # type: ignore[attr-defined]
        response = self.get_response(request)
        return self.finish(request, response, key)

    def process_view(
        self, request: HttpRequest, view: Callable, args: tuple, kwargs: dict[str, Any]
    ) -> None:
        match = request.resolver_match
        request._http_cache_policy = policy_for(  # type: ignore[attr-defined]
            view, match.url_name if match else None
        )
        request._http_cache_kwargs = kwargs  # type: ignore[attr-defined]

    def finish(
        self, request: HttpRequest, response: HttpResponseBase, key: str | None
    ) -> HttpResponseBase:
        policy: Policy | None = getattr(request, "_http_cache_policy", None)
        public = (
            policy is not None
            and request.method in ("GET", "HEAD")
            and response.status_code in (200, 301, 302, 404)
            and not response.cookies
            and not _signed_in(request)
        )
        if not public:
            response["Cache-Control"] = PRIVATE
            return response
        assert policy is not None
        kwargs = getattr(request, "_http_cache_kwargs", {})
        response["xkey"] = " ".join(dict.fromkeys(policy.keys(request, kwargs)))
        vary = [
            v.strip()
            for v in response.get("Vary", "").split(",")
            if v.strip() and v.strip().lower() != "cookie"  # anonymous answers are all alike
        ]
        if vary:
            response["Vary"] = ", ".join(vary)
        elif "Vary" in response:
            del response["Vary"]
        if response.status_code == 404:
            # kept briefly by a proxy, purged with its keys (a result about to be published)
            response["Cache-Control"] = "public, max-age=0, s-maxage=60"
            return response
        kind = policy.kind
        if kind is PAGE and response.get("Content-Type", "").startswith("text/csv"):
            kind = CSV  # a page's table as ?format=csv
        response["Cache-Control"] = kind.header()
        if page_cache.served_stale.get():
            # the previous generation's page, during the grace after a publish: a proxy
            # keeps it no longer than the grace (the rebuild's purge normally comes first)
            response["Cache-Control"] = (
                f"public, max-age=0, s-maxage={int(page_cache.STALE_GRACE_S)}"
            )
        if response.streaming or response.status_code != 200:
            return response
        generation = getattr(request, "_http_cache_generation", None) or page_cache.generation()
        body = response.content
        response["ETag"] = etag_for(body, generation)
        if (
            key is not None
            and policy.memo
            and not page_cache.served_stale.get()
            and len(body) <= MEMO_MAX_BYTES * 4
        ):
            headers = {h: response[h] for h in STORED_HEADERS if h in response}
            for name, value in response.items():  # headers set below (a CSP) ride along
                headers.setdefault(name, value)
            headers.pop("Content-Length", None)
            entry = (200, headers, body)
            cache.set(key, entry, timeout=page_cache.TIMEOUT_S)
            if len(body) <= MEMO_MAX_BYTES:
                _memo.put(key, entry)
        if _matches(request, response["ETag"]):
            return _not_modified(dict(response.items()))
        return response


def _signed_in(request: HttpRequest) -> bool:
    if settings.SESSION_COOKIE_NAME not in request.COOKIES:
        return False
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated)
