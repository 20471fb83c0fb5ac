"""Request throttles whose counts are shared by every web process and updated by one at a
time (docs/security.md "Shared state across processes").

DRF's SimpleRateThrottle reads a key's request history from the cache and writes it back:
two processes at once count two requests as one (3,300 MCP calls on 8 threads were counted
as 1,010). `counting(key)` holds a short lock around that read and write. The client's
address is the login throttle's (core.logins.client_address: REMOTE_ADDR, or behind
TRUSTED_PROXY_COUNT proxies the entry the outermost appended): an `X-Forwarded-For` a client
writes itself never chooses its bucket."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.cache import cache
from rest_framework import throttling

from core.logins import client_address

LOCK_WAIT_S = 2.0
LOCK_EXPIRES_S = 5


@contextmanager
def counting(key: str) -> Iterator[None]:
    """One web process at a time reads and writes `key`'s request history. The lock is a
    cache add(), atomic in Redis and in the database cache, held for milliseconds; a lock
    nobody releases expires, and a caller never waits past LOCK_WAIT_S."""
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


class CountedThrottleMixin:
    """allow_request under `counting(key)`, so no request goes uncounted; the client is the
    address core.logins.client_address trusts."""

    def get_ident(self, request: Any) -> str:
        return client_address(request) or ""

    def allow_request(self, request: Any, view: Any) -> bool:
        if self.rate is None:  # type: ignore[attr-defined]
            return True
        key = self.get_cache_key(request, view)  # type: ignore[attr-defined]
        if key is None:
            return True
        with counting(key):
            return super().allow_request(request, view)  # type: ignore[misc]


class AnonThrottle(CountedThrottleMixin, throttling.AnonRateThrottle):
    """The public API's anonymous rate (`anon`), per client address, counted exactly."""
