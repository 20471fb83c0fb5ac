"""Embeddable charts, static frontier images and the chart pages' Open Graph tags
(issue 27 item 4; docs/api.md "Embeds")."""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest
from django.urls import reverse
from PIL import Image

from demo.synthetic import (
    make_hardware,
    make_model,
    make_published_result,
    make_tier_set,
    synthetic_points,
)
from leaderboard.publishing import result_set_status
from tests.leaderboard.test_pages import figure_of


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.starts: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.starts.append((tag, dict(attrs)))

    def of(self, tag: str) -> list[dict]:
        return [a for t, a in self.starts if t == tag]


def tags(response) -> Tags:
    parser = Tags()
    parser.feed(response.content.decode())
    return parser


@pytest.fixture
def pair(db):
    """A model on two systems, one result each, with the default tier set."""
    model = make_model(name="Frontier Model")
    gb300 = make_hardware(name="GB300 NVL72")
    mi355 = make_hardware(name="MI355X")
    tiers = make_tier_set()
    a = make_published_result(model=model, hardware=gb300, tier_set=tiers, label="GB300 run")
    b = make_published_result(
        model=model,
        hardware=mi355,
        tier_set=tiers,
        label="MI355X run",
        points=synthetic_points(single_agent_speed=120.0),
    )
    return model, gb300, mi355, a, b


def embed_url(model, **query) -> str:
    url = reverse("embed-model", args=[model.slug])
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def test_the_embed_may_be_framed_by_anyone_and_other_pages_may_not(client, pair):
    model, gb300, *_ = pair
    response = client.get(embed_url(model, hardware=gb300.slug))
    assert response.status_code == 200
    assert "X-Frame-Options" not in response
    policy = response["Content-Security-Policy"]
    assert "frame-ancestors *" in policy and "script-src 'self'" in policy
    page = client.get(reverse("model-detail", args=[model.slug]))
    assert page["X-Frame-Options"] == "DENY"
    assert "frame-ancestors *" not in page.get("Content-Security-Policy", "")


def test_the_embed_has_no_navigation_and_no_inline_script(client, pair):
    model, gb300, *_ = pair
    response = client.get(embed_url(model, hardware=gb300.slug))
    parsed = tags(response)
    assert not parsed.of("nav") and not parsed.of("header") and not parsed.of("footer")
    # one link: the attribution, opening outside the frame, to the model's full page
    anchors = parsed.of("a")
    assert len(anchors) == 1
    assert anchors[0]["target"] == "_blank"
    assert urlsplit(anchors[0]["href"]).path == reverse("model-detail", args=[model.slug])
    scripts = parsed.of("script")
    # every executable script is a file from this site (a CSP with nonces needs none)
    assert all(s.get("src") or s.get("type") == "application/json" for s in scripts)


def test_the_embed_draws_the_chosen_hardware_and_marks_the_chosen_tier(client, pair):
    model, gb300, mi355, a, b = pair
    figure = figure_of(client.get(embed_url(model, hardware=gb300.slug, tier="60%20tok/s")))
    assert [t["meta"]["result_id"] for t in figure["data"]] == [a.pk]
    solid = [s for s in figure["layout"]["shapes"] if s["line"]["dash"] == "solid"]
    assert [s["x0"] for s in solid] == [60]
    both = figure_of(client.get(embed_url(model)))
    assert sorted(t["meta"]["result_id"] for t in both["data"]) == sorted([a.pk, b.pk])


def test_bad_embed_input_is_a_400_naming_the_field(client, pair):
    model, *_ = pair
    response = client.get(embed_url(model, hardware="no-such-system"))
    assert response.status_code == 400
    assert "hardware" in response.json()["error"]["fields"]
    response = client.get(embed_url(model, tier="999 tok/s"))
    assert response.status_code == 400
    assert "tier" in response.json()["error"]["fields"]
    for fmt in ("png", "svg"):
        image = client.get(reverse("embed-model-image", args=[model.slug, fmt]) + "?hardware=nope")
        assert image.status_code == 400 and "hardware" in image.json()["error"]["fields"]
    # nothing outside the three fields: a junk query string never forces a fresh render
    image_url = reverse("embed-model-image", args=[model.slug, "png"])
    for query, field in (("x=1", "x"), ("simulated=maybe", "simulated"), ("tier=a&tier=b", "tier")):
        for url in (image_url, reverse("embed-model", args=[model.slug])):
            answer = client.get(f"{url}?{query}")
            assert answer.status_code == 400 and field in answer.json()["error"]["fields"]
    assert client.get(reverse("embed-model", args=["no-such-model"])).status_code == 404
    assert client.get(reverse("embed-model-image", args=[model.slug, "gif"])).status_code == 404


def test_png_and_svg_are_valid_images_of_the_frontier(client, pair):
    model, gb300, mi355, a, _ = pair
    for name, args in (
        ("embed-model-image", [model.slug]),
        ("embed-hardware-image", [gb300.slug]),
        ("embed-result-image", [a.pk]),
    ):
        png = client.get(reverse(name, args=[*args, "png"]))
        assert png.status_code == 200 and png["Content-Type"] == "image/png"
        image = Image.open(io.BytesIO(png.content))
        image.verify()
        assert image.format == "PNG" and image.size == (1200, 630)
        svg = client.get(reverse(name, args=[*args, "svg"]))
        assert svg.status_code == 200 and svg["Content-Type"] == "image/svg+xml"
        root = ET.fromstring(svg.content)
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
    # the SVG's text is the chart's: title, axis, each result's name
    text = client.get(reverse("embed-model-image", args=[model.slug, "svg"])).content.decode()
    assert "Frontier Model" in text and "GB300 run" in text and "MI355X run" in text


def test_the_images_change_with_a_publish_and_return_after_an_invalidation(
    client, pair, django_capture_on_commit_callbacks
):
    model, gb300, _, _, _ = pair
    urls = [
        reverse("embed-model-image", args=[model.slug, fmt]) + f"?hardware={gb300.slug}"
        for fmt in ("png", "svg")
    ]
    before = [client.get(u).content for u in urls]
    assert [client.get(u).content for u in urls] == before  # the same data, the same bytes
    with django_capture_on_commit_callbacks(execute=True):
        newer = make_published_result(
            model=model,
            hardware=gb300,
            tier_set=make_tier_set(),
            label="GB300 newer engine",
            points=synthetic_points(single_agent_speed=240.0),
        )
    after = [client.get(u).content for u in urls]
    assert after[0] != before[0] and after[1] != before[1]
    assert b"GB300 newer engine" in after[1]
    with django_capture_on_commit_callbacks(execute=True):
        result_set_status(result=newer, to="invalidated", actor=None, reason="wrong weights")
    assert [client.get(u).content for u in urls] == before


def test_an_invalidated_results_image_says_so(client, db, django_capture_on_commit_callbacks):
    result = make_published_result(label="Retired run")
    with django_capture_on_commit_callbacks(execute=True):
        result_set_status(result=result, to="invalidated", actor=None, reason="wrong weights")
    svg = client.get(reverse("embed-result-image", args=[result.pk, "svg"])).content.decode()
    assert "INVALIDATED" in svg


@pytest.mark.parametrize("page", ["model", "hardware", "result", "history"])
def test_every_chart_page_carries_open_graph_tags_of_its_image(client, pair, page):
    model, gb300, _, a, _ = pair
    url, image = {
        "model": (
            reverse("model-detail", args=[model.slug]),
            reverse("embed-model-image", args=[model.slug, "png"]),
        ),
        "hardware": (
            reverse("hardware-detail", args=[gb300.slug]),
            reverse("embed-hardware-image", args=[gb300.slug, "png"]),
        ),
        "result": (
            reverse("result-detail", args=[a.pk]),
            reverse("embed-result-image", args=[a.pk, "png"]),
        ),
        "history": (
            reverse("history", args=[model.slug, gb300.slug]),
            reverse("embed-model-image", args=[model.slug, "png"]) + f"?hardware={gb300.slug}",
        ),
    }[page]
    meta = {
        m.get("property") or m.get("name"): m.get("content")
        for m in tags(client.get(url)).of("meta")
    }
    assert meta["og:image"] == f"http://testserver{image}"
    assert meta["twitter:image"] == meta["og:image"]
    assert meta["og:url"] == f"http://testserver{url}"
    assert meta["twitter:card"] == "summary_large_image"
    image_url = urlsplit(meta["og:image"])
    fetched = client.get(image_url.path + (f"?{image_url.query}" if image_url.query else ""))
    assert fetched.status_code == 200 and fetched["Content-Type"] == "image/png"


def test_open_graph_links_use_the_public_base_url_when_set(client, pair, settings):
    model, *_ = pair
    settings.PUBLIC_BASE_URL = "https://agentperf.example"
    html = client.get(reverse("model-detail", args=[model.slug])).content.decode()
    image = reverse("embed-model-image", args=[model.slug, "png"])
    assert re.search(rf'property="og:image" content="https://agentperf.example{image}"', html)


def test_a_page_rebuilt_in_the_background_renders_its_open_graph_tags(pair):
    """The background rebuild's request has no host: the tags fall back to paths."""
    from leaderboard.rebuild import pages_rebuild

    _, _, _, a, _ = pair
    assert reverse("result-detail", args=[a.pk]) in pages_rebuild(result_ids=[a.pk])


def test_embeds_and_images_are_cached_like_pages(client, pair):
    """Public Cache-Control, an ETag with 304, surrogate keys purged with the model's pages;
    a repeated read (the shared cache's fast path) keeps the embed's frame policy."""
    model, gb300, *_ = pair
    for url in (
        embed_url(model, hardware=gb300.slug),
        reverse("embed-model-image", args=[model.slug, "png"]),
        reverse("embed-hardware-image", args=[gb300.slug, "svg"]),
    ):
        first = client.get(url)
        assert first["Cache-Control"].startswith("public, max-age=")
        assert "s-maxage=" in first["Cache-Control"]
        keys = first["xkey"].split()
        assert f"model:{model.slug}" in keys or f"hardware:{gb300.slug}" in keys
        again = client.get(url)
        assert again.content == first.content and again["ETag"] == first["ETag"]
        assert client.get(url, HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 304
    repeated = client.get(embed_url(model, hardware=gb300.slug))
    assert "X-Frame-Options" not in repeated
    assert "frame-ancestors *" in repeated["Content-Security-Policy"]


def test_a_dollar_sign_in_a_name_is_text_not_mathtext(client, db):
    """Names are data: "$" once made matplotlib parse mathtext ("ours $\\frac{$" was a 500)."""
    model = make_model(name="Price $5 vs $10 model")
    result = make_published_result(model=model, label=r"ours $\frac{$ run")
    for fmt in ("png", "svg"):
        answer = client.get(reverse("embed-result-image", args=[result.pk, fmt]))
        assert answer.status_code == 200, answer.content[:300]
    svg = client.get(reverse("embed-model-image", args=[model.slug, "svg"])).content.decode()
    assert "Price $5 vs $10 model" in svg and r"ours $\frac{$ run" in svg


def test_one_readers_host_never_decides_the_open_graph_links_of_the_next(client, pair):
    """The hostile finding: the first render after a publish decided og:image for every
    later reader (the page cache was keyed by path alone). Without PUBLIC_BASE_URL each
    origin gets its own cached page; a reader's Host or scheme never reaches another's."""
    _, _, _, a, _ = pair
    url = reverse("result-detail", args=[a.pk])
    image = reverse("embed-result-image", args=[a.pk, "png"])

    def og_image(**headers) -> str:
        meta = {
            m.get("property") or m.get("name"): m.get("content")
            for m in tags(client.get(url, **headers)).of("meta")
        }
        return meta["og:image"]

    assert og_image(HTTP_HOST="localhost", HTTP_X_FORWARDED_PROTO="https") == (
        f"http://localhost{image}"  # X-Forwarded-Proto counts only where a proxy is trusted
    )
    assert og_image(HTTP_HOST="127.0.0.1") == f"http://127.0.0.1{image}"
    assert og_image(HTTP_HOST="localhost") == f"http://localhost{image}"
