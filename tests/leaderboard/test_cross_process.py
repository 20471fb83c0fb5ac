"""Correct across processes (issue 17 finding 4; docs/security.md "Shared state across
processes"): gunicorn with two worker processes over real HTTP, against the test database,
once with each profile's shared cache (Redis; the database table of the embedded profile).

A change made in another process (here: this test's, as a reviewer's request would be in
one web worker) is what every worker serves once it commits, and a throttle counts the
requests of all workers together.
"""

from __future__ import annotations

import concurrent.futures
import json
import urllib.error
import urllib.request

import pytest
from django.conf import settings as django_settings
from django.core.cache import cache
from django.core.management import call_command

from demo.synthetic import make_org, make_published_result
from leaderboard.publishing import result_set_status
from submissions.services.tokens import api_token_create
from tests.support.webserver import start_gunicorn
from tests.support.workers import worker_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

REQUESTS = 50
THROTTLE_R = 7
CONCURRENT_R = 12
DATABASE_CACHE = {
    "BACKEND": "django.core.cache.backends.db.DatabaseCache",
    "LOCATION": "agentperf_cache",
    "KEY_PREFIX": "",
}


@pytest.fixture(params=["redis", "database"])
def shared_cache(request, settings) -> dict[str, str]:
    """This process's cache set to the profile's, and the environment that gives gunicorn
    the same one."""
    prefix = f"{django_settings.CACHE_KEY_PREFIX}-xproc-{request.param}"
    if request.param == "redis":
        url = worker_env().get("CACHE_REDIS_URL") or "redis://127.0.0.1:6379/0"
        settings.CACHES = {
            "default": {
                "BACKEND": "core.cache.PrefixedRedisCache",
                "LOCATION": url,
                "KEY_PREFIX": prefix,
            }
        }
        env = {"CACHE_REDIS_URL": url, "CACHE_KEY_PREFIX": prefix}
    else:
        settings.CACHES = {"default": {**DATABASE_CACHE, "KEY_PREFIX": prefix}}
        call_command("createcachetable")  # what `make migrate` runs
        env = {"CACHE_REDIS_URL": "", "CACHE_KEY_PREFIX": prefix}
    cache.clear()
    yield env
    cache.clear()


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, object]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code


def _seen(base: str, pk: int) -> tuple[str, bool]:
    """(the result's status in its public item, whether the public list shows it)."""
    code, item = _get(f"{base}/api/v1/public/results/{pk}/")
    assert code == 200, item
    code, listing = _get(f"{base}/api/v1/public/results/")
    assert code == 200, listing
    return item["status"], any(entry["id"] == pk for entry in listing)


def _warm(server, base: str, pk: int) -> None:
    """Both workers up, and the result read (and cached) as published, many times over."""
    for _ in range(20):
        assert _seen(base, pk) == ("published", True)
    assert len(server.worker_pids()) == 2


def test_an_invalidation_is_seen_by_every_worker_at_once(shared_cache, tmp_path):
    result = make_published_result()
    server = start_gunicorn(tmp_path / "gunicorn.log", workers=2, env=worker_env(**shared_cache))
    try:
        _warm(server, server.url, result.pk)
        result_set_status(result=result, to="invalidated", actor=None, reason="wrong model")
        seen = [_seen(server.url, result.pk) for _ in range(REQUESTS)]
        assert seen == [("invalidated", False)] * REQUESTS

        # and a publish is seen by every worker too: the new result is in every list
        fresh = make_published_result()
        listed = [_seen(server.url, fresh.pk) for _ in range(REQUESTS)]
        assert listed == [("published", True)] * REQUESTS
    finally:
        server.stop()
    assert "Traceback" not in server.log(), server.log()[-3000:]


def test_a_throttle_of_r_per_hour_answers_429_at_request_r_plus_1_across_workers(
    shared_cache, tmp_path
):
    _, token = api_token_create(org=make_org(), name="throttled")
    env = worker_env(**shared_cache, THROTTLE_VENDOR_SUBMIT=f"{THROTTLE_R}/hour")
    server = start_gunicorn(tmp_path / "gunicorn.log", workers=2, env=env)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"}
    try:
        # an invalid config: each request counts against the quota, and none is stored
        codes = [
            _post(f"{server.url}/api/v1/submissions/", b"schema_version: 1\n", headers)
            for _ in range(THROTTLE_R + 3)
        ]
    finally:
        server.stop()
    assert codes == [400] * THROTTLE_R + [429] * 3


def test_concurrent_requests_on_both_workers_are_each_counted_once(shared_cache, tmp_path):
    _, token = api_token_create(org=make_org(), name="racing")
    env = worker_env(**shared_cache, THROTTLE_VENDOR_SUBMIT=f"{CONCURRENT_R}/hour")
    server = start_gunicorn(tmp_path / "gunicorn.log", workers=2, env=env)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"}
    url = f"{server.url}/api/v1/submissions/"
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            codes = list(pool.map(lambda _: _post(url, b"schema_version: 1\n", headers), range(30)))
    finally:
        server.stop()
    assert sorted(codes) == [400] * CONCURRENT_R + [429] * (30 - CONCURRENT_R)


def _get_status(url: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code


def test_the_public_apis_anonymous_rate_counts_each_request_whatever_it_claims(
    shared_cache, tmp_path
):
    """The hostile finding: a fresh X-Forwarded-For on each request was a fresh bucket, and
    concurrent requests were lost from the count (DRF's read-then-write). Reached directly
    (TRUSTED_PROXY_COUNT 0) the address is the peer's; 30 requests at once on two workers,
    each claiming another address, are each counted once."""
    env = worker_env(**shared_cache, THROTTLE_ANON=f"{CONCURRENT_R}/hour")
    server = start_gunicorn(tmp_path / "gunicorn.log", workers=2, env=env)
    url = f"{server.url}/api/v1/public/results/"
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            codes = list(
                pool.map(
                    # each a new query: a miss of the fast path's cache, which answers a
                    # repeated read before the view (and its throttle) runs
                    lambda i: _get_status(
                        f"{url}?n={i}", {"X-Forwarded-For": f"10.66.{i // 250}.{i % 250}"}
                    ),
                    range(30),
                )
            )
    finally:
        server.stop()
    # at most the rate (the readiness probes spend from the same address's bucket)
    assert set(codes) <= {200, 429} and codes.count(200) <= CONCURRENT_R, sorted(codes)
    assert codes.count(429) >= 30 - CONCURRENT_R, sorted(codes)
