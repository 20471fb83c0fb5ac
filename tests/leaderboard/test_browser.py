"""The public pages in a real browser: Playwright driving Debian Chromium against the live
test server. Every request the page makes is recorded; anything not on the live server's
loopback address is aborted and fails the test."""

from __future__ import annotations

import pytest
from django.urls import reverse

from demo.synthetic import (
    make_hardware,
    make_model,
    make_published_result,
    make_tier_set,
    synthetic_points,
)
from tests.support.browser import PHONE

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _trace_dom(page) -> list[int]:
    """Points drawn per trace, read from the SVG Plotly rendered."""
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('#frontier .scatterlayer .trace'))
                 .map(t => t.querySelectorAll('.points path.point').length)"""
    )


def test_model_page_draws_one_trace_per_result_and_hover_shows_concurrency(
    page_factory, live_server, artifacts_dir
):
    model, tiers = make_model(name="DeepSeek V4.1 Flash (max)"), make_tier_set()
    sizes = {5: (1, 2, 4, 8, 16), 7: (1, 2, 4, 8, 16, 32, 64), 3: (1, 4, 16)}
    for n_points, concurrencies in sizes.items():
        make_published_result(
            model=model,
            hardware=make_hardware(name=f"System {n_points}"),
            tier_set=tiers,
            label=f"System {n_points} (1 Nov)",
            points=synthetic_points(concurrencies=concurrencies),
        )
    page = page_factory()
    page.goto(live_server.url + reverse("model-detail", args=[model.slug]))
    page.wait_for_selector("#frontier .scatterlayer .trace")
    assert sorted(_trace_dom(page)) == [3, 5, 7]
    assert page.title().startswith("DeepSeek V4.1 Flash (max)")

    # hover the third point of the 7-point trace: concurrency 4
    x, y = page.evaluate(
        """() => {
            const gd = document.getElementById('frontier');
            const i = gd._fullData.findIndex(t => t.x.length === 7);
            const t = gd._fullData[i], xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
            const box = gd.getBoundingClientRect();
            return [box.left + xa._offset + xa.l2p(t.x[2]), box.top + ya._offset + ya.l2p(t.y[2])];
        }"""
    )
    page.mouse.move(x, y)
    hover = page.wait_for_selector(".hoverlayer .hovertext")
    assert "N=4 agents" in hover.text_content()
    page.screenshot(path=str(artifacts_dir / "model-page-hover.png"), full_page=True)


def test_the_log_toggle_works_from_the_keyboard(page_factory, live_server, artifacts_dir):
    result = make_published_result()
    page = page_factory()
    page.goto(live_server.url + reverse("model-detail", args=[result.model.slug]))
    page.wait_for_selector("#frontier .scatterlayer .trace")
    page.focus('button[data-scale="log"]')
    page.keyboard.press("Enter")
    page.wait_for_function("document.getElementById('frontier')._fullLayout.xaxis.type === 'log'")
    assert page.get_attribute('button[data-scale="log"]', "aria-pressed") == "true"
    assert "scale=log" in page.url  # the shared link keeps the choice


def test_compare_page_shows_the_known_ratio(page_factory, live_server, artifacts_dir):
    model, tiers = make_model(), make_tier_set()
    base = make_published_result(
        model=model,
        tier_set=tiers,
        label="Base",
        points=[(1, 200.0, 100.0, 0.5), (8, 100.0, 400.0, 1.0), (32, 50.0, 1000.0, 3.0)],
    )
    new = make_published_result(
        model=model,
        tier_set=tiers,
        label="New",
        points=[(1, 220.0, 150.0, 0.5), (8, 100.0, 700.0, 1.0), (32, 50.0, 1400.0, 3.0)],
    )
    page = page_factory()
    page.goto(live_server.url + reverse("compare") + f"?r={base.pk}&r={new.pk}&speed=75")
    row = page.locator("#t-iso_speed").locator("xpath=ancestor::section").locator("tr.picked")
    assert "1.50×" in row.inner_text()
    page.wait_for_selector("#frontier .scatterlayer .trace")
    # each result's three trials, then the two readings at 75 tok/s (between trials, so
    # marked as read between measured points: docs/engine.md "Frontier and comparisons")
    assert _trace_dom(page) == [3, 3, 2]
    assert "read between measured points" in row.inner_text()
    legend = page.evaluate("document.getElementById('frontier')._fullData[2].name")
    assert legend == "iso-speed reading (read between measured points)"
    page.screenshot(path=str(artifacts_dir / "compare.png"), full_page=True)


def test_result_page_on_a_phone_keeps_tables_inside_the_screen(
    page_factory, live_server, artifacts_dir
):
    result = make_published_result(simulated=True, label="Dry run")
    page = page_factory(PHONE)
    page.goto(live_server.url + reverse("result-detail", args=[result.pk]))
    page.wait_for_selector("#frontier .scatterlayer .trace")
    overflow = page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 1, "the page scrolls sideways on a phone"
    assert page.locator("text=Simulated result.").is_visible()
    page.screenshot(path=str(artifacts_dir / "result-phone.png"), full_page=True)
