"""Concurrent requests are each counted by the throttle (docs/security.md "Shared state
across processes"): DRF's throttle reads a request history and writes it back, so two
requests read at once would be counted as one. The history is read slowly here so that the
requests overlap every time; the lock in portal.api.access makes them take turns.
Threads stand in for web processes: the lock is a cache add(), the same across both."""

from __future__ import annotations

import concurrent.futures
import time
import types

import pytest
from django.core.cache import cache

from portal.api.access import VendorSubmitThrottle

RATE = 5
CALLERS = 8


class _SlowReads:
    """The shared cache, with each read of a throttle history taking 30 ms."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def get(self, key, default=None):
        value = self.inner.get(key, default)
        time.sleep(0.03)
        return value

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def slow_throttle(monkeypatch):
    monkeypatch.setattr(VendorSubmitThrottle, "THROTTLE_RATES", {"vendor_submit": f"{RATE}/hour"})
    monkeypatch.setattr(VendorSubmitThrottle, "cache", _SlowReads(cache))
    cache.clear()
    yield
    cache.clear()


def test_overlapping_requests_are_each_counted_once(slow_throttle):
    org = types.SimpleNamespace(pk=987654)
    request = types.SimpleNamespace(_vendor_org=org, method="POST", user=None, META={})

    def one(_: int) -> bool:
        return VendorSubmitThrottle().allow_request(request, None)

    with concurrent.futures.ThreadPoolExecutor(max_workers=CALLERS) as pool:
        allowed = list(pool.map(one, range(CALLERS)))
    assert allowed.count(True) == RATE
    assert allowed.count(False) == CALLERS - RATE
