"""Bands on simulated results (docs/simulator.md "Bands"): a simulated result of a profile
with a committed band stores the band (ratios to the profile's nominal frontier, the
treatment, the open parameters), its frontier chart draws it as a filled band and its page
lists the open parameters. The band is the one `python -m agentperf.simulator band --write`
wrote for tests/simulator/fit/tiny-fit.yaml (an open chunk size and the fit's uncertainty).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.urls import reverse

from demo.synthetic import make_published_result

TINY_FIT = str(Path(__file__).resolve().parents[1] / "simulator/fit/tiny-fit.yaml")
POINTS = [
    (1, 160.0, 2_000.0, 0.1),
    (2, 140.0, 6_000.0, 0.1),
    (4, 120.0, 12_000.0, 0.2),
    (8, 70.0, 30_000.0, 0.3),
    (16, 40.0, 40_000.0, 0.5),
]


def _figure(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="frontier-data">(.*?)</script>', html)
    assert m, "the result page has no frontier chart data"
    return json.loads(m.group(1))


@pytest.mark.django_db
def test_a_simulated_result_stores_its_profiles_band_and_its_page_draws_and_lists_it(client):
    sim = make_published_result(
        points=POINTS,
        simulated=True,
        label="Twin",
        config={"launcher": {"simulated": {"profile": TINY_FIT}}},
    )
    # the profile, given by its file, is named by its stem: no host path on the public page
    assert sim.twin_profile == "tiny-fit"
    band = sim.band
    assert band["profile"] == "tiny-fit" and band["treatment"] == "envelope"
    assert [p["name"] for p in band["open_parameters"]] == ["deployment.aggregated.chunk_tokens"]
    assert band["open_parameters"][0]["range"] == [2048, 8192]
    assert any(s.startswith("fit ") for s in band["samples"])  # the fit's uncertainty
    assert len(band["ratios"]) >= 2
    for _speed, low, high, _line in band["ratios"]:
        assert low <= 1.0 <= high and high > low  # the nominal lies inside its band
    html = client.get(reverse("result-detail", args=[sim.pk])).content.decode()
    assert 'id="open-parameters"' in html
    assert "deployment.aggregated.chunk_tokens" in html and "2048 – 8192" in html
    assert "(profile <code>tiny-fit</code>," in html  # the lede names it, no path
    fig = _figure(html)
    edges = [t for t in fig["data"] if (t.get("meta") or {}).get("band")]
    assert len(edges) == 2 and edges[1]["fill"] == "tonexty"
    low, high = edges[0]["y"], edges[1]["y"]
    assert all(lo < hi for lo, hi in zip(low, high, strict=True))
    # the band sits around the result's own frontier: at 100 tok/s (between N = 4 and 8)
    # the frontier steps: at 100 tok/s (between N = 4 and 8) it is N = 4's 12,000, the most
    # a trial at least that fast gave, never a value read between the two trials
    x = edges[0]["x"]
    assert 100.0 in x or any(70.0 < s < 120.0 for s in x)
    for k, speed in enumerate(x):
        if 70.0 < speed <= 120.0:
            assert low[k] <= 12_000 <= high[k]
    assert all(e["line"]["shape"] == "vh" for e in edges)


@pytest.mark.django_db
def test_no_band_without_a_committed_one_nor_on_a_measured_result_nor_with_overrides(client):
    measured = make_published_result(points=POINTS, label="Rack")
    assert measured.band is None
    plain = make_published_result(
        points=POINTS, simulated=True, config={"launcher": {"simulated": {"profile": "tiny"}}}
    )
    assert plain.band is None  # tiny has no band file
    patched = make_published_result(
        points=POINTS,
        simulated=True,
        config={
            "launcher": {
                "simulated": {
                    "profile": TINY_FIT,
                    "overrides": {"efficiency": {"compute": 0.3}},
                }
            }
        },
    )
    assert patched.band is None  # a what-if's band was never computed
    html = client.get(reverse("result-detail", args=[plain.pk])).content.decode()
    assert 'id="open-parameters"' not in html
    assert not [t for t in _figure(html)["data"] if (t.get("meta") or {}).get("band")]
