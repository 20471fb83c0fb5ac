"""/llms.txt (issue 27 item 4; docs/api.md "llms.txt"): what the site is, the metric
definitions as docs/engine.md states them, and links that work."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from django.urls import reverse

from demo.synthetic import make_hardware, make_model, make_published_result, make_tier_set
from leaderboard.export import export_public
from leaderboard.llms import ENGINE_DOC
from leaderboard.methodology import engine_constants

HEADINGS = (
    "Metric definitions",
    "Service tiers",
    "Public read API",
    "MCP server",
    "Data dumps",
    "JSON Schemas",
    "Pages",
)
DEFINITIONS = (
    "Percentiles: nearest rank",
    "Throughput per accelerator.",
    "Tier verdict.",
    "Window.",
)


@pytest.fixture
def published(db):
    model = make_model(name="Listed Model")
    system = make_hardware(name="Listed System")
    tiers = make_tier_set()
    result = make_published_result(model=model, hardware=system, tier_set=tiers)
    return model, system, tiers, result


def llms(client) -> str:
    response = client.get("/llms.txt")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    return response.content.decode()


def test_it_describes_the_site_in_the_llmstxt_shape(client, published):
    text = llms(client)
    lines = text.splitlines()
    assert lines[0] == "# AgentPerf Leaderboard"
    assert lines[2].startswith("> AgentPerf is an open benchmark of LLM inference serving")
    for heading in HEADINGS:
        assert re.search(rf"^## {heading}", text, re.M), heading


def test_the_definitions_are_docs_engine_mds_own_words(client, published):
    text = llms(client)
    doc = " ".join(line.strip() for line in ENGINE_DOC.read_text().splitlines())
    for lead in DEFINITIONS:
        line = next(line for line in text.splitlines() if line.startswith(f"- **{lead}"))
        assert line[2:] in doc  # verbatim (reflowed) from docs/engine.md
    engine = engine_constants()
    assert f"cap {engine['cap']}" in text
    assert ", ".join(f"p{p}" for p in engine["ttft_percentiles"]) in text


def test_it_lists_live_data_with_links_that_answer(client, published):
    model, system, tiers, result = published
    export_public()  # the dump's files answer once there is one
    text = llms(client)
    assert f"[{model.name}](http://testserver{reverse('model-detail', args=[model.slug])})" in text
    assert (
        f"[{system.name}](http://testserver{reverse('hardware-detail', args=[system.slug])})"
        in text
    )
    assert f"{tiers.name} v{tiers.version}" in text
    first = tiers.tiers.order_by("order").first()
    assert f"{first.name}: p25 output speed ≥ {first.min_p25_output_speed:g} tok/s" in text
    assert f"[the newest](http://testserver/api/v1/public/results/{result.pk}/)" in text
    links = re.findall(r"\]\((http://testserver[^)\s]*)\)", text)
    assert len(links) >= 12
    for link in links:
        parts = urlsplit(link)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        status = client.get(path).status_code
        assert status in (200, 302), (link, status)  # the dump link redirects to storage


def test_a_publish_shows_in_it_at_once(client, published, django_capture_on_commit_callbacks):
    _, system, tiers, _ = published
    assert "Second Model" not in llms(client)
    with django_capture_on_commit_callbacks(execute=True):
        make_published_result(
            model=make_model(name="Second Model"), hardware=system, tier_set=tiers
        )
    assert "[Second Model](" in llms(client)


def test_it_names_the_public_base_url_when_set(client, published, settings):
    settings.PUBLIC_BASE_URL = "https://agentperf.example"
    settings.PUBLIC_MCP_URL = "https://agentperf.example/mcp"
    text = llms(client)
    assert "here at https://agentperf.example/mcp." in text
    assert "(https://agentperf.example/api/v1/public/models/)" in text
    assert "http://testserver" not in text
