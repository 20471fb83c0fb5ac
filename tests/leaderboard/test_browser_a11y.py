"""axe-core in Debian's Chromium: no serious or critical violation on any public page, the
vendor portal or the review console (issue 35 item 4). axe-core comes from npm
(package.json, `make browser`); it is evaluated in the page, so the site's CSP stays on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.review.builders import make_reviewable
from tests.review.test_browser import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"


def serious(page) -> list[str]:
    """The page's serious and critical axe violations as "rule: first target" lines."""
    page.evaluate(AXE.read_text())
    return page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
            .filter(v => v.impact === 'serious' || v.impact === 'critical')
            .map(v => v.id + ': ' + v.nodes.length + ' × ' + v.nodes[0].target.join(' '))"""
    )


def test_axe_finds_nothing_serious_on_the_public_pages(
    site,
    page_factory,
    live_server,
):
    page = page_factory()
    found = {}
    for name, path in site.items():
        page.goto(live_server.url + path)
        if page.locator(".plot[data-figure]").count():
            page.wait_for_selector(".js-plotly-plot .main-svg")  # axe sees the drawn charts
        violations = serious(page)
        if violations:
            found[name] = violations
    assert found == {}


def test_axe_finds_nothing_serious_in_the_portal_and_the_review_console(
    page_factory,
    live_server,
    cast,
):
    sub = make_reviewable(org=cast.org_a, artifacts=True)
    found = {}
    vendor = page_factory()
    sign_in(vendor, live_server, cast.alice, "/portal/")
    for path in (
        "/portal/",
        "/portal/submit/",
        f"/portal/submissions/{sub.pk}/",
        "/portal/ladders/",
    ):
        vendor.goto(live_server.url + path)
        found[path] = serious(vendor)
    reviewer = page_factory()
    sign_in(reviewer, live_server, cast.rita, "/review/")
    for path in ("/review/", f"/review/submissions/{sub.pk}/"):
        reviewer.goto(live_server.url + path)
        if reviewer.locator("#trial-chart").count():
            reviewer.wait_for_selector("#trial-chart .main-svg")
        found[path] = serious(reviewer)
    assert {p: v for p, v in found.items() if v} == {}
    assert len(found) == 6
