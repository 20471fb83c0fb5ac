"""A control character in a URL's path or query is a 400 naming where, never a 500
(docs/security.md "Input limits"): PostgreSQL refuses NUL in text lookups."""

from __future__ import annotations

import pytest

from tests.submissions.support import token_client

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/api/v1/public/results/?model=%00", "model"),
        ("/api/v1/public/results/?model=a%1Bb", "model"),
        ("/api/v1/public/models/a%00b/", "path"),
        ("/api/v1/public/hardware/a%00b/", "path"),
    ],
)
def test_a_control_character_in_an_api_url_is_a_400_naming_it(client, url, field):
    response = client.get(url)
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


def test_a_nul_in_the_vendor_list_filter_is_a_400_naming_it(cast):
    response = token_client(cast.org_a).get("/api/v1/submissions/?status=%00")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["status"]


def test_a_nul_in_a_page_path_is_a_400(client):
    response = client.get("/models/a%00b/")
    assert response.status_code == 400
    assert b"path" in response.content


def test_ordinary_query_text_still_works(client):
    assert client.get("/api/v1/public/results/?model=some-model").status_code == 200
