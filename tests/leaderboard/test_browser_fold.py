"""The public pages lead with their answer and fit the screen, in Debian's Chromium (issue 35;
docs/benchmarks.md "Pages in the browser").

The `site` fixture (conftest.py) holds measured results on three systems, a simulated result with a band, a model
with simulated results only and the GB300 engine ladder, all made through the publishing
code. Screenshots of every page at both widths are kept under the test's artifacts folder.
"""

from __future__ import annotations

import re

import pytest

from tests.support.browser import LAPTOP, PHONE

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FOLD = {"width": 1366, "height": 768}


def _overflow(page) -> list[str]:
    """The outermost elements reaching past the viewport's right edge, when the page scrolls
    sideways (empty when it does not)."""
    return page.evaluate(
        """() => {
            if (document.documentElement.scrollWidth <= innerWidth) return [];
            const wide = [];
            for (const e of document.querySelectorAll('body *')) {
                if (e.getBoundingClientRect().right <= innerWidth + 1) continue;
                if (wide.some(w => w.contains(e))) continue;
                wide.push(e);
            }
            return ['page ' + document.documentElement.scrollWidth + ' px wide'].concat(
                wide.slice(0, 4).map(e => e.outerHTML.slice(0, 120)));
        }"""
    )


def test_no_public_page_is_wider_than_a_laptop_or_a_phone(
    site, page_factory, live_server, artifacts_dir
):
    too_wide = {}
    for viewport in (LAPTOP, PHONE):
        page = page_factory(viewport)
        for name, path in site.items():
            page.goto(live_server.url + path, wait_until="load")
            if page.locator(".plot[data-figure]").count():
                page.wait_for_selector(".js-plotly-plot .main-svg")
            shot = artifacts_dir / f"{name}-{viewport['width']}.png"
            page.screenshot(path=str(shot), full_page=True)
            found = _overflow(page)
            if found:
                too_wide[f"{name} at {viewport['width']} px"] = found
    assert too_wide == {}
    assert len(list(artifacts_dir.glob("*.png"))) == 2 * len(site)


@pytest.mark.parametrize(
    "name", ["result-measured", "result-simulated-band", "result-simulated-only"]
)
def test_a_result_page_shows_its_verdict_and_its_whole_chart_in_the_first_screen(
    site, name, page_factory, live_server, artifacts_dir
):
    page = page_factory(FOLD)
    page.goto(live_server.url + site[name])
    page.wait_for_selector("#frontier .scatterlayer .trace")
    boxes = page.evaluate(
        """() => ['h1', '#verdict', '#frontier'].map(s => {
            const r = document.querySelector(s).getBoundingClientRect();
            return [s, r.top + scrollY, r.bottom + scrollY]; })"""
    )
    for selector, top, bottom in boxes:
        assert 0 <= top < bottom <= FOLD["height"], (selector, top, bottom)
    strip = page.locator("#verdict li")
    assert strip.count() == 5  # one per tier of the default tier set
    assert re.search(r"\d+ agents?|none", strip.first.inner_text())
    page.screenshot(path=str(artifacts_dir / f"{name}-fold.png"))


def test_frontier_lines_step_between_measured_points(site, page_factory, live_server):
    page = page_factory()
    page.goto(live_server.url + site["model"])
    page.wait_for_selector("#frontier .scatterlayer .trace")
    drawn = page.evaluate(
        """() => {
            const gd = document.getElementById('frontier');
            return gd._fullData.filter(t => t.meta && t.meta.result_id && !t.meta.band)
                .map(t => ({shape: t.line.shape, x: t.x, y: t.y,
                            d: gd.querySelectorAll('.scatterlayer .trace')[t.index]
                                 .querySelector('path.js-line').getAttribute('d')}));
        }"""
    )
    assert len(drawn) == 3  # the measured results; the twin is hidden unless asked for
    for trace in drawn:
        assert trace["shape"] == "hv"
        # the drawn path is a staircase: a move, then only horizontal and vertical runs
        steps = re.findall(r"[MLHV][^MLHV]*", trace["d"])
        assert steps[0].startswith("M") and len(steps) == 2 * (len(trace["x"]) - 1) + 1
        assert {s[0] for s in steps[1:]} == {"H", "V"}
        # in trial order: across at the faster trial's throughput, then up to the next
        assert [s[0] for s in steps[1:3]] == ["H", "V"]


def test_a_link_into_a_closed_section_opens_it(site, page_factory, live_server):
    page = page_factory()
    page.goto(live_server.url + site["result-measured"] + "#receipt")
    page.wait_for_function("document.getElementById('data-section').open")
    assert page.locator("#receipt").is_visible()
    assert not page.evaluate("document.getElementById('trials-section').open")


def test_home_leads_with_the_frontier_across_systems_and_max_agents_bars(
    site, page_factory, live_server, artifacts_dir
):
    page = page_factory(FOLD)
    page.goto(live_server.url + site["home"] + "?tier=60%20tok/s")
    page.wait_for_selector("#frontier .scatterlayer .trace")
    names = page.evaluate(
        "document.getElementById('frontier')._fullData.filter(t => t.meta && "
        "t.meta.result_id).map(t => t.name)"
    )
    assert len(names) == 3 and all("(1 Nov)" in n for n in names)  # one per system
    bars = page.locator("figure.bars li")
    assert bars.count() == 3
    assert page.evaluate("document.querySelector('#frontier').getBoundingClientRect().top") < 768
    page.screenshot(path=str(artifacts_dir / "home-fold.png"))


def test_a_model_with_only_simulated_results_draws_them_labelled(site, page_factory, live_server):
    page = page_factory()
    page.goto(live_server.url + site["model-simulated-only"])
    page.wait_for_selector("#frontier .scatterlayer .trace")
    assert page.locator("#simulated-only").is_visible()
    names = page.evaluate(
        "document.getElementById('frontier')._fullData.filter(t => t.meta && "
        "t.meta.result_id).map(t => t.name)"
    )
    # its profile is unnamed, so nothing checked it: quarantined, and the chart says so
    assert names == ["Twin only [simulated, quarantined twin]"]
    assert page.locator(".notice.quarantine").is_visible()
