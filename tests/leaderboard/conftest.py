"""Shared fixtures of the leaderboard tests: a cold cache per test, browser pages that keep
to the live server, and a site with every kind of public page."""

import io
import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.urls import reverse

from demo.synthetic import make_hardware, make_model, make_org, make_published_result
from ladders.services import ladder_import
from tests.support.browser import LAPTOP, csp_watch

ROOT = Path(__file__).resolve().parents[2]
TINY_FIT = str(ROOT / "tests" / "simulator" / "fit" / "tiny-fit.yaml")
POINTS = [(1, 160.0, 2_000.0, 0.1), (2, 140.0, 6_000.0, 0.1), (4, 120.0, 12_000.0, 0.2),
          (8, 70.0, 30_000.0, 0.3), (16, 40.0, 40_000.0, 0.5)]  # fmt: skip


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Chart and API payloads are cached per publish generation; start every test cold."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def page_factory(browser, live_server):
    """New pages whose every request is recorded; off-server requests are aborted."""
    allowed = urlsplit(live_server.url).netloc
    seen: list[str] = []
    contexts = []

    def guard(route):
        url = route.request.url
        seen.append(url)
        if urlsplit(url).netloc == allowed or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            route.abort()

    def make(viewport=LAPTOP):
        context = browser.new_context(viewport=viewport)
        context.route("**/*", guard)
        csp_watch(context, violations)
        contexts.append(context)
        return context.new_page()

    violations: list[str] = []
    make.requests = seen
    yield make
    for context in contexts:
        context.close()
    # docs/security.md "Headers": the charts draw under the site's CSP, nothing refused
    assert violations == [], f"Content-Security-Policy violations: {violations}"
    strays = [u for u in seen if urlsplit(u).netloc != allowed and not u.startswith("data:")]
    assert strays == [], f"requests left the live server: {strays}"
    assert seen, "no request was recorded"


@pytest.fixture
def site(db) -> dict[str, str]:
    """Every kind of public page, by name: its path."""
    model = make_model(name="DeepSeek V4.1 Flash (max)")
    twin_only = make_model(name="Vera model")
    systems = [make_hardware(name=n) for n in ("H100 ×8", "B200 ×8", "MI355X ×8")]
    org = make_org("Vendor")
    measured = [
        make_published_result(
            model=model,
            hardware=systems[i],
            org=org,
            label=f"{systems[i].name} (1 Nov)",
            points=[(n, s * (1 + i / 10), y * (1 + i), t) for n, s, y, t in POINTS],
        )
        for i in range(3)
    ]
    twin = make_published_result(
        model=model,
        hardware=systems[0],
        org=org,
        simulated=True,
        label="Twin with a band",
        points=POINTS,
        config={"launcher": {"simulated": {"profile": TINY_FIT}}},
    )
    only = make_published_result(
        model=twin_only, hardware=systems[1], org=org, simulated=True, label="Twin only"
    )
    ladder = ladder_import(
        org=org,
        doc=json.loads((ROOT / "docs/examples/ladder-gb300.json").read_text()),
        model=model,
        hardware=systems[1],
    )
    call_command("twin_accuracy", stdout=io.StringIO())
    return {
        "home": reverse("home"),
        "models": reverse("model-list"),
        "model": reverse("model-detail", args=[model.slug]),
        "model-simulated-only": reverse("model-detail", args=[twin_only.slug]),
        "hardware-list": reverse("hardware-list"),
        "hardware": reverse("hardware-detail", args=[systems[0].slug]),
        "result-measured": reverse("result-detail", args=[measured[0].pk]),
        "result-simulated-band": reverse("result-detail", args=[twin.pk]),
        "result-simulated-only": reverse("result-detail", args=[only.pk]),
        "compare": reverse("compare") + f"?r={measured[0].pk}&r={measured[1].pk}&speed=130",
        "history": reverse("history", args=[model.slug, systems[0].slug]),
        "methodology": reverse("methodology"),
        "twin-accuracy": reverse("twin-accuracy"),
        "data": reverse("data"),
        "ladders": reverse("ladder-list"),
        "ladder": reverse("ladder-detail", args=[ladder.pk]),
    }
