"""The embed framed by another site, in a real browser (Playwright driving Debian Chromium
against the live test server; docs/api.md "Embeds"): the chart draws inside the frame
under the embed's own Content-Security-Policy, and the model page itself refuses to be
framed."""

from __future__ import annotations

import html
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote, urlsplit

import pytest
from django.urls import reverse

from demo.synthetic import make_hardware, make_model, make_published_result, make_tier_set
from tests.support.browser import csp_watch

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


class _Post(BaseHTTPRequestHandler):
    """Another site's page: it frames the live server's path given as its query."""

    frame_base = ""

    def do_GET(self) -> None:
        path = unquote(urlsplit(self.path).query)
        body = (
            "<!doctype html><title>A post</title><p>Our numbers:</p>"
            f'<iframe id="chart" src="{html.escape(self.frame_base + path)}"'
            ' width="900" height="640"></iframe>'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def framed(browser, live_server):
    """A page of another site that frames a path of the live server: a real HTTP server on
    127.0.0.1 where the live server is on localhost (another origin and site, both on
    loopback, as Chromium's local network access checks require of a page framing a
    loopback one). Requests anywhere else are aborted and fail the test."""
    assert urlsplit(live_server.url).hostname == "localhost"
    handler = type("Post", (_Post,), {"frame_base": live_server.url})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    embedder = f"http://127.0.0.1:{server.server_address[1]}"
    allowed = {urlsplit(live_server.url).netloc, urlsplit(embedder).netloc}
    strays: list[str] = []
    violations: list[str] = []
    context = browser.new_context()
    csp_watch(context, violations)

    def guard(route):
        url = route.request.url
        if urlsplit(url).netloc in allowed or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            strays.append(url)
            route.abort()

    context.route("**/*", guard)

    def open_framing(path: str):
        page = context.new_page()
        page.goto(f"{embedder}/post?{quote(path)}")
        return page

    yield open_framing, violations
    context.close()
    server.shutdown()
    server.server_close()
    assert strays == [], f"requests left the loopback servers: {strays}"


def _chart_frame(page, live_server):
    page.wait_for_load_state("load")
    frames = [f for f in page.frames if f.url.startswith(live_server.url)]
    return frames[0] if frames else None


def test_the_embed_draws_inside_another_sites_frame(framed, live_server):
    open_framing, violations = framed
    model = make_model(name="Embedded Model")
    system = make_hardware(name="GB300 NVL72")
    tiers = make_tier_set()
    for label in ("run one", "run two"):
        make_published_result(model=model, hardware=system, tier_set=tiers, label=label)
    path = reverse("embed-model", args=[model.slug]) + f"?hardware={system.slug}&tier=60%20tok/s"
    page = open_framing(path)
    frame = _chart_frame(page, live_server)
    assert frame is not None, [f.url for f in page.frames]
    frame.wait_for_selector("#frontier .scatterlayer .trace")
    traces = frame.evaluate(
        "() => document.querySelectorAll('#frontier .scatterlayer .trace').length"
    )
    assert traces == 2
    assert frame.evaluate("() => document.querySelectorAll('nav, header, footer').length") == 0
    assert violations == [], f"Content-Security-Policy violations: {violations}"


def test_the_model_page_refuses_to_be_framed(framed, live_server):
    open_framing, _ = framed
    model = make_model(name="Unframed Model")
    make_published_result(model=model)
    page = open_framing(reverse("model-detail", args=[model.slug]))
    page.wait_for_load_state("load")
    # Chromium blocks the frame (X-Frame-Options: DENY): no document of the site in it
    drawn = [f for f in page.frames if f.url.startswith(live_server.url) and f.query_selector("h1")]
    assert drawn == []
