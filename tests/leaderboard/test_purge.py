"""The purge task (docs/caching.md "Surrogate keys and purge"): the keys a change sends, on
commit only, nothing without a proxy, and a retry while the proxy does not answer."""

from __future__ import annotations

import http.server
import threading

import pytest
from celery.exceptions import Retry

from demo.synthetic import make_published_result
from leaderboard import purge
from leaderboard.publishing import result_set_status

pytestmark = pytest.mark.django_db


class _Proxy(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str]] = []
    status = 200

    def do_PURGE(self) -> None:
        type(self).seen.append((self.path, self.headers.get("xkey-purge", "")))
        self.send_response(type(self).status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def proxy():
    _Proxy.seen, _Proxy.status = [], 200
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/", _Proxy
    server.shutdown()
    server.server_close()


@pytest.fixture
def sent(monkeypatch):
    """The keys purge_send would queue (the broker is not what is tested here)."""
    calls: list[list[str]] = []
    monkeypatch.setattr(
        purge.purge_http_cache, "apply_async", lambda args, **kw: calls.append(args[0])
    )
    return calls


def test_an_invalidation_sends_exactly_its_results_keys_on_commit(
    settings, sent, django_capture_on_commit_callbacks
):
    settings.VARNISH_PURGE_URLS = ["http://127.0.0.1:9/"]
    result = make_published_result()
    m, h = result.model.slug, result.hardware.slug
    sent.clear()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        result_set_status(result=result, to="invalidated", actor=None, reason="wrong model")
    assert sent == []  # nothing before the commit
    for callback in callbacks:
        callback()
    assert sorted(sent[0]) == sorted(
        ["index", f"result:{result.pk}", f"model:{m}", f"hardware:{h}", f"pair:{m}:{h}"]
    )


def test_without_a_proxy_nothing_is_sent(settings, sent, django_capture_on_commit_callbacks):
    settings.VARNISH_PURGE_URLS = []
    with django_capture_on_commit_callbacks(execute=True):
        make_published_result()
    assert sent == []


def test_the_task_purges_every_proxy_with_the_keys_header(settings, proxy):
    url, handler = proxy
    settings.VARNISH_PURGE_URLS = [url, url]
    answers = purge.purge_http_cache.apply(args=[["result:1", "index"]]).get()
    assert len(answers) == 2
    assert handler.seen == [("/", "result:1 index")] * 2


def test_the_task_retries_while_a_proxy_does_not_answer(settings, proxy, monkeypatch):
    url, handler = proxy
    retries: list[int] = []

    def retry(exc=None, countdown=None):  # the worker would send the task again later
        retries.append(countdown)
        return Retry(exc=exc, when=countdown)

    monkeypatch.setattr(purge.purge_http_cache, "retry", retry)
    settings.VARNISH_PURGE_URLS = ["http://127.0.0.1:9/"]  # nothing listens (discard port)
    assert purge.purge_http_cache.apply(args=[["index"]]).state == "RETRY"
    settings.VARNISH_PURGE_URLS = [url]
    handler.status = 503
    assert purge.purge_http_cache.apply(args=[["index"]]).state == "RETRY"
    assert retries == [1, 1]  # backing off from one second (the task's retry count)
    handler.status = 200
    assert purge.purge_http_cache.apply(args=[["index"]]).state == "SUCCESS"
    assert handler.seen[-1] == ("/", "index")


def test_a_catalog_change_bumps_the_pages_and_purges_the_catalog_key_on_commit(
    settings, sent, django_capture_on_commit_callbacks
):
    from demo.synthetic import make_model
    from leaderboard.cache import generation, removal_epoch

    settings.VARNISH_PURGE_URLS = ["http://127.0.0.1:9/"]
    model = make_model()
    before = (generation(), removal_epoch())
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        model.name = "Renamed"
        model.save()
    assert sent == [["catalog"]]
    after = (generation(), removal_epoch())
    assert after[0] != before[0] and after[1] != before[1]  # no stale grace for it
