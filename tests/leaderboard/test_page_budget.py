"""Every public page's HTML within 100 KB with 30 published results, its chart data sent once
(issue 35; docs/benchmarks.md "Pages in the browser"). Sizes, not times: the same on any
machine."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from demo.synthetic import make_hardware, make_model, make_org, make_published_result

pytestmark = pytest.mark.django_db

BUDGET = 100 * 1024
CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64)


@pytest.fixture
def thirty(db) -> dict[str, str]:
    model = make_model(name="Budget model")
    systems = [make_hardware(name=f"System {i}") for i in range(3)]
    org = make_org("Vendor")
    results = [
        make_published_result(
            model=model,
            hardware=systems[i % 3],
            org=org,
            label=f"System {i % 3} run {i}",
            points=[(n, 300.0 / n**0.5, 500.0 * n, 0.2) for n in CONCURRENCIES],
        )
        for i in range(30)
    ]
    return {
        "home": reverse("home"),
        "model": reverse("model-detail", args=[model.slug]),
        "hardware": reverse("hardware-detail", args=[systems[0].slug]),
        "result": reverse("result-detail", args=[results[-1].pk]),
        "compare": reverse("compare") + f"?r={results[0].pk}&r={results[1].pk}",
        "history": reverse("history", args=[model.slug, systems[0].slug]),
        "methodology": reverse("methodology"),
    }


def test_every_public_page_is_within_100_kb_with_its_chart_data_sent_once(client, thirty):
    sizes = {}
    for name, path in thirty.items():
        html = client.get(path).content
        sizes[name] = len(html)
        frontier = re.findall(rb'id="frontier-data">(.*?)</script>', html, re.S)
        assert len(frontier) <= 1, name
        if frontier:
            # the hover text and the page look travel once per figure, not once per trace
            assert frontier[0].count(b"hovertemplate") == 1, name
            assert b'"barpolar"' not in frontier[0], name  # no unused trace-type defaults
    assert {n: s for n, s in sizes.items() if s > BUDGET} == {}
    assert sizes["model"] > 20 * 1024  # the model page does carry all 30 results
