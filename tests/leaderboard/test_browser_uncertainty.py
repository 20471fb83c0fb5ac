"""Error bars and the session timeline in a real browser (Debian Chromium via Playwright,
loopback only: the guard of tests/leaderboard/test_browser.py aborts anything else)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.support.records import Shape, make_result_with_records

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHAPES = [Shape(1, 220, 0.5), Shape(4, 160, 0.8), Shape(16, 110, 2.0), Shape(32, 45, 6.0)]


def _error_bars(page) -> dict[str, int]:
    """Error-bar paths Plotly drew on the frontier chart, per axis."""
    return page.evaluate(
        """() => ({
            x: document.querySelectorAll('#frontier .errorbars path.xerror').length,
            y: document.querySelectorAll('#frontier .errorbars path.yerror').length,
        })"""
    )


def test_result_and_model_pages_draw_an_error_bar_on_every_point(
    page_factory,
    live_server,
    artifacts_dir,
):
    result = make_result_with_records(shapes=SHAPES, label="Measured (1 Dec)")
    page = page_factory()
    page.goto(live_server.url + reverse("result-detail", args=[result.pk]))
    page.wait_for_selector("#frontier .errorbars path.yerror")
    assert _error_bars(page) == {"x": len(SHAPES), "y": len(SHAPES)}
    # the bars span the stored interval: compare the drawn extent with the data
    span = page.evaluate(
        """() => {
            const t = document.getElementById('frontier')._fullData[0];
            return [t.error_y.array[2], t.error_y.arrayminus[2]];
        }"""
    )
    point = sorted(result.points, key=lambda p: p["concurrency"])[2]
    thr = point["intervals"]["throughput_per_accelerator"]
    assert span[0] == pytest.approx(thr["high"] - point["throughput_per_accelerator"])
    assert span[1] == pytest.approx(point["throughput_per_accelerator"] - thr["low"])
    page.locator("#tiers-section > summary").click()  # the tiers' detail opens on demand
    tiers = page.locator("#t-tiers").locator("xpath=ancestor::section")
    row = tiers.locator("tr", has_text="60 tok/s").first.inner_text()
    assert "16" in row and "32" in row  # highest pass and lowest fail
    page.screenshot(path=str(artifacts_dir / "result-error-bars.png"), full_page=True)

    page.goto(live_server.url + reverse("model-detail", args=[result.model.slug]))
    page.wait_for_selector("#frontier .errorbars path.xerror")
    assert _error_bars(page) == {"x": len(SHAPES), "y": len(SHAPES)}
    assert page.locator("text=16 … 32").first.is_visible()


def test_the_session_timeline_draws_a_picked_sessions_turns(
    page_factory,
    live_server,
    artifacts_dir,
):
    result = make_result_with_records(shapes=SHAPES, label="Timeline")
    page = page_factory()
    failures = []
    page.on("response", lambda r: failures.append((r.url, r.status)) if r.status >= 400 else None)
    page.goto(live_server.url + reverse("result-detail", args=[result.pk]))
    timeline = page.locator("#session-timeline")
    page.locator("#timeline > summary").click()  # the section opens on demand
    # the first trial's first session is drawn on arrival
    page.wait_for_selector("#session-timeline .timeline-turns tbody tr")
    timeline.locator('select[name="trial"]').select_option("2")  # N = 16
    page.wait_for_function(
        """() => document.querySelectorAll('#session-timeline select[name=session] option').length >= 16"""
    )
    options = timeline.locator('select[name="session"] option')
    value = options.nth(3).get_attribute("value")
    agent, session = value.split("|", 1)
    timeline.locator('select[name="session"]').select_option(value)
    page.wait_for_function(
        f"""() => document.querySelector('#session-timeline .timeline-status').textContent
                 .includes('session {session}:')"""
    )
    api = f"/api/v1/public/results/{result.pk}/trials/2/timeline/"
    expected = page.evaluate(
        f"""() => fetch('{api}?agent={agent}&session={session}&limit=50').then(r => r.json())"""
    )
    rows = timeline.locator(".timeline-turns tbody tr")
    assert rows.count() == len(expected["turns"]) > 1
    first = rows.nth(0).inner_text()
    assert f"{expected['turns'][0]['n_in']:,}" in first
    assert f"{expected['turns'][1]['n_cached']:,}" in rows.nth(1).inner_text()
    # three bar traces (waiting, streaming, tool delay), one bar per turn each
    bars = page.evaluate(
        """() => Array.from(document.querySelectorAll('#session-timeline .barlayer .trace'))
                 .map(t => t.querySelectorAll('.point').length)"""
    )
    assert len(bars) == 3 and bars[0] == bars[1] == len(expected["turns"])
    page.screenshot(path=str(artifacts_dir / "session-timeline.png"), full_page=True)
    assert failures == []
