"""Chart and API cache: every entry is keyed by a generation that a publish bumps.

Bumping one generation key invalidates every cached page fragment at once, without listing
keys. The keys live in the cache every web process shares (Redis with `CACHE_REDIS_URL`,
else the database's cache table; config/settings.py "Cache"), so a bump made by one
process on commit is what every other process reads next (docs/security.md "Shared state
across processes").

Stale while revalidate, pages only: a publish only adds a result, so for `STALE_GRACE_S`
after it a visitor may get the page as it was before (missing the new result) while the
`leaderboard.rebuild_pages` task builds the new one. A result leaving the pages (invalidated,
superseded) bumps a second key, the removal epoch, as well: a page is served stale only if
it was built in the current removal epoch, so a retired result is never shown once its
status change has committed. The epoch is read before a page's queries, so a page built
from rows read before a removal carries the old epoch and is never served stale after it.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from django.core.cache import cache

GENERATION_KEY = "leaderboard:generation"
REMOVAL_KEY = "leaderboard:removal-epoch"
TIMEOUT_S = 3600
# How long after a publish a visitor may still get the previous page (the background
# rebuild takes well under a second; this bounds staleness if no worker picks it up).
STALE_GRACE_S = 60.0
T = TypeVar("T")
# set when `cached_page` answers with the previous generation's value: the HTTP fast path
# (leaderboard.httpcache) never stores such a response under the new generation
served_stale: ContextVar[bool] = ContextVar("served_stale", default=False)


def _new_generation() -> str:
    # the bump time rides in the value: how stale the previous pages may be, with one key
    return f"{time.time():.3f}-{uuid.uuid4().hex}"


def _current(key: str, make: Callable[[], str]) -> str:
    value = cache.get(key)
    if value is None:
        value = make()
        # add() keeps a value another process set meanwhile
        if not cache.add(key, value, timeout=None):
            value = cache.get(key) or value
    return value


def generation() -> str:
    return _current(GENERATION_KEY, _new_generation)


def removal_epoch() -> str:
    return _current(REMOVAL_KEY, lambda: uuid.uuid4().hex)


def _bumped_at(gen: str) -> float:
    head, _, _ = gen.partition("-")
    try:
        return float(head)
    except ValueError:  # a value written by an older version: no grace
        return 0.0


def chart_cache_invalidate() -> None:
    """Drop every cached chart, page and API payload, with no stale grace (a result left
    the public pages, or a test wants a cold cache)."""
    # epoch first: between the two writes a visitor still gets the old generation's page,
    # as one whose request began before the change would
    cache.set(REMOVAL_KEY, uuid.uuid4().hex, timeout=None)
    cache.set(GENERATION_KEY, _new_generation(), timeout=None)


def chart_cache_added() -> None:
    """A result was published: new generation; pages may be served stale meanwhile."""
    cache.set(GENERATION_KEY, _new_generation(), timeout=None)


def _digest(key: str) -> str:
    return hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()


def cached(key: str, build: Callable[[], T], *, gen: str | None = None) -> T:
    """`build()` once per generation for `key`."""
    full = f"lb:{gen or generation()}:{_digest(key)}"
    hit: Any = cache.get(full)
    if hit is not None:
        return hit
    value = build()
    cache.set(full, value, timeout=TIMEOUT_S)
    return value


def cached_page(key: str, build: Callable[[], T], *, refresh: bool = False) -> T:
    """Like `cached`, and within `STALE_GRACE_S` of a publish the previous value rather than
    a rebuild when it was built in the current removal epoch. `refresh` builds and stores
    whatever is cached (the background rebuild)."""
    digest = _digest(key)
    gen = generation()
    full, last = f"lb:{gen}:{digest}", f"lb:last:{digest}"
    if not refresh:
        hits = cache.get_many([full, last])
        if full in hits:
            return hits[full]
        previous = hits.get(last)
        epoch = removal_epoch()
        if (
            previous is not None
            and previous[0] == epoch
            and time.time() - _bumped_at(gen) < STALE_GRACE_S
        ):
            served_stale.set(True)
            return previous[1]
    else:
        epoch = removal_epoch()
    value = build()
    if value is not None:
        cache.set_many({full: value, last: (epoch, value)}, timeout=TIMEOUT_S)
    return value
