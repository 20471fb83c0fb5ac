"""Embeds and frontier images through the reverse proxy (docs/api.md "Embeds and images",
docs/caching.md): the repository's Varnish in front of gunicorn, a real Celery worker
purging by surrogate key. An invalidation committed through the pipeline takes the result
out of the model's image and embed at the next read through the proxy; an unrelated
model's image stays a cache hit."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from demo.synthetic import make_hardware, make_model, make_published_result
from leaderboard.publishing import result_set_status
from leaderboard.purge import purge_send
from tests.leaderboard.test_varnish import PURGED, REBUILT, proxied  # noqa: F401 - fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SENTINEL = "embed-test-sentinel"
SENTINEL_PURGED = re.compile(rf"proxy purged \['{SENTINEL}'\]")


def test_an_invalidation_purges_the_models_image_and_embed_and_nothing_else(proxied):  # noqa: F811
    p = proxied
    result = make_published_result(label="Soon retired")
    other = make_published_result(model=make_model(), hardware=make_hardware(), label="Bystander")
    p.wait_events(REBUILT, 2)
    # Every purge the setup sent (each catalog save and publish sends one on commit, and the
    # images carry the catalog key) is done before the reads below, or a late one would turn
    # the expected hit into a miss: the one worker runs the web queue in order, so a marker
    # purge sent now finishes after all of them.
    purge_send([SENTINEL])
    p.wait_events(SENTINEL_PURGED, 1)
    image = reverse("embed-model-image", args=[result.model.slug, "svg"])
    embed = reverse("embed-model", args=[result.model.slug])
    unrelated = reverse("embed-model-image", args=[other.model.slug, "svg"])
    for path in (image, embed, unrelated):
        code, headers, body = p.get(path)
        assert code == 200, body[:300]
    code, headers, body = p.get(image)
    assert headers["X-Cache"] == "HIT" and b"Soon retired" in body
    code, headers, body = p.get(embed)
    assert headers["X-Cache"] == "HIT" and b"Soon retired" in body
    assert "X-Frame-Options" not in headers
    assert "frame-ancestors *" in headers["Content-Security-Policy"]
    assert p.get(unrelated)[1]["X-Cache"] == "HIT"

    purges = p.events(PURGED)
    result_set_status(result=result, to="invalidated", actor=None, reason="wrong model")
    p.wait_events(PURGED, purges + 1)  # the purge sent on commit

    code, headers, body = p.get(image)
    assert code == 200 and headers["X-Cache"] == "MISS"
    assert b"Soon retired" not in body
    code, headers, body = p.get(embed)
    assert headers["X-Cache"] == "MISS" and b"Soon retired" not in body
    assert p.get(unrelated)[1]["X-Cache"] == "HIT"
