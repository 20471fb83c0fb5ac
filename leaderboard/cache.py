"""Chart and API cache: every entry is keyed by a generation that a publish bumps.

Bumping one generation key invalidates every cached page fragment at once, without listing
keys. With several web processes the cache must be shared (`CACHE_REDIS_URL`); the
per-process memory cache only suits one process (tests, `make demo`).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.cache import cache

GENERATION_KEY = "leaderboard:generation"
TIMEOUT_S = 3600
T = TypeVar("T")


def generation() -> str:
    value = cache.get(GENERATION_KEY)
    if value is None:
        value = uuid.uuid4().hex
        # add() keeps a value another process set meanwhile
        if not cache.add(GENERATION_KEY, value, timeout=None):
            value = cache.get(GENERATION_KEY) or value
    return value


def chart_cache_invalidate() -> None:
    """Drop every cached chart and API payload (called on publish and status change)."""
    cache.set(GENERATION_KEY, uuid.uuid4().hex, timeout=None)


def cached(key: str, build: Callable[[], T], *, gen: str | None = None) -> T:
    """`build()` once per generation for `key`."""
    digest = hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()
    full = f"lb:{gen or generation()}:{digest}"
    hit: Any = cache.get(full)
    if hit is not None:
        return hit
    value = build()
    cache.set(full, value, timeout=TIMEOUT_S)
    return value
