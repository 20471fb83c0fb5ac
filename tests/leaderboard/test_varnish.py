"""The reverse proxy (docs/caching.md): the repository's Varnish (deploy/varnish/, started by
tests/services.py on its own loopback port) in front of gunicorn, a real Celery worker
purging it by surrogate key when a change commits.

After an invalidation or a publish has gone through the pipeline (the change commits, the
worker rebuilds the pages and purges their keys), the first read through the proxy shows
the new state; a page the change does not touch stays a cache hit.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field

import pytest
from django.urls import reverse

from core.queues import web_queue
from demo.synthetic import make_hardware, make_model, make_published_result
from leaderboard.publishing import result_set_status
from leaderboard.tasks import purge_http_cache, rebuild_pages
from tests.support.webserver import WebServer, start_gunicorn
from tests.support.workers import WorkerProcess, drop_queued, start_worker, worker_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

EVENT_TIMEOUT_S = 300.0  # a hang guard, not a speed bound: a loaded 2-core host is slow
PURGED = re.compile(r"Task leaderboard\.purge_http_cache\[[^\]]+\] succeeded")
REBUILT = re.compile(r"Task leaderboard\.rebuild_pages\[[^\]]+\] succeeded")


@dataclass
class Proxied:
    proxy: str
    site: WebServer
    worker: WorkerProcess
    # tasks this process queued (counted by the fixture): each rebuild queues one purge more
    sent: Counter = field(default_factory=Counter)

    def get(self, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(self.proxy + path, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def events(self, pattern: re.Pattern) -> int:
        return len(pattern.findall(self.worker.log()))

    def wait_events(self, pattern: re.Pattern, count: int) -> None:
        """Until the worker's log shows `count` of these events (it is the event itself we
        wait for: a task that finished)."""
        deadline = time.monotonic() + EVENT_TIMEOUT_S
        while self.events(pattern) < count:
            assert time.monotonic() < deadline, self.worker.log()[-3000:]
            time.sleep(0.1)

    def settle(self) -> None:
        """Until every task queued so far has finished: the rebuilds this process queued,
        then its purges and the one each rebuild sends after it. A purge still in the queue
        would drop a page the test has just read into the proxy."""
        self.wait_events(REBUILT, self.sent["rebuild"])
        self.wait_events(PURGED, self.sent["purge"] + self.sent["rebuild"])


def _counting(task, sent: Counter, kind: str):
    send = task.apply_async

    def apply_async(*args, **kwargs):
        sent[kind] += 1
        return send(*args, **kwargs)

    return apply_async


@pytest.fixture
def proxied(tmp_path, settings, monkeypatch):
    url = os.environ.get("TEST_VARNISH_URL")
    port = os.environ.get("TEST_VARNISH_BACKEND_PORT")
    if not url or not port:
        pytest.fail("no Varnish: run the tests through `python -m tests.services`")
    purge = {"VARNISH_PURGE_URL": url + "/"}
    settings.VARNISH_PURGE_URLS = [url + "/"]  # this process's commits send the purges
    env = worker_env(**purge)
    # earlier tests of the session may have left rebuilds and purges in the web queue (no
    # worker ran them); this worker would run them too, uncounted, and a late purge would
    # drop a page the test has just read into the proxy
    drop_queued(web_queue())
    worker = start_worker([web_queue()], tmp_path / "worker.log", env=env)
    site = start_gunicorn(tmp_path / "gunicorn.log", workers=2, env=env, port=int(port))
    p = Proxied(url, site, worker)
    monkeypatch.setattr(
        purge_http_cache, "apply_async", _counting(purge_http_cache, p.sent, "purge")
    )
    monkeypatch.setattr(rebuild_pages, "apply_async", _counting(rebuild_pages, p.sent, "rebuild"))
    try:
        yield p
    finally:
        site.stop()
        worker.stop()
    assert "Traceback" not in site.log(), site.log()[-3000:]


def _api_status(p: Proxied, pk: int) -> tuple[str, str]:
    code, headers, body = p.get(f"/api/v1/public/results/{pk}/", Accept="application/json")
    assert code == 200, body[:300]
    return json.loads(body)["status"], headers["X-Cache"]


def test_after_an_invalidation_the_proxy_never_serves_the_result_as_published(proxied):
    p = proxied
    result = make_published_result(label="Soon retired")
    other = make_published_result(model=make_model(), hardware=make_hardware(), label="Bystander")
    p.settle()  # both publishes' rebuilds and every purge they and the catalog rows sent
    unrelated = reverse("model-detail", args=[other.model.slug])
    model_page = reverse("model-detail", args=[result.model.slug])
    for path in (unrelated, model_page):
        p.get(path)
    assert _api_status(p, result.pk)[0] == "published"
    assert _api_status(p, result.pk) == ("published", "HIT")
    assert p.get(model_page)[1]["X-Cache"] == "HIT"
    assert b"Soon retired" in p.get(model_page)[2]
    assert p.get(unrelated)[1]["X-Cache"] == "HIT"

    result_set_status(result=result, to="invalidated", actor=None, reason="wrong model")
    assert p.sent["purge"] > 0
    p.settle()  # the purge sent on commit

    assert _api_status(p, result.pk) == ("invalidated", "MISS")
    code, headers, body = p.get(model_page)
    assert code == 200 and headers["X-Cache"] == "MISS"
    assert b"Soon retired" not in body
    # the page the change does not touch was never purged
    assert p.get(unrelated)[1]["X-Cache"] == "HIT"


def test_after_a_publish_the_first_read_through_the_proxy_shows_the_new_result(proxied):
    p = proxied
    first = make_published_result(label="First run")
    other = make_published_result(model=make_model(), hardware=make_hardware(), label="Bystander")
    p.settle()
    model_page = reverse("model-detail", args=[first.model.slug])
    unrelated = reverse("model-detail", args=[other.model.slug])
    listing = "/api/v1/public/results/"
    for path in (model_page, unrelated, listing):
        p.get(path)
        assert p.get(path)[1]["X-Cache"] == "HIT"

    rebuilds = p.sent["rebuild"]
    # on the catalog rows already there (a catalog change purges every page: leaderboard.purge)
    same = {"model": first.model, "hardware": first.hardware, "tier_set": first.tier_set}
    fresh = make_published_result(org=first.submission.org, label="Fresh run", **same)
    # the purge on commit, the rebuild, then the purge after it
    assert p.sent["rebuild"] == rebuilds + 1
    p.settle()

    code, headers, body = p.get(model_page)
    assert code == 200 and b"Fresh run" in body and b"First run" in body
    ids = [r["id"] for r in json.loads(p.get(listing, Accept="application/json")[2])]
    assert fresh.pk in ids
    assert p.get(unrelated)[1]["X-Cache"] == "HIT"


def test_the_proxy_revalidates_with_the_sites_etag(proxied):
    p = proxied
    result = make_published_result()
    path = f"/api/v1/public/results/{result.pk}/"
    code, headers, _ = p.get(path)
    assert code == 200 and headers["ETag"]
    code, again, body = p.get(path, **{"If-None-Match": headers["ETag"]})
    assert code == 304 and body == b""
    assert "xkey" not in {k.lower() for k in again}  # the keys stay in the proxy
