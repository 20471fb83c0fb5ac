"""The portal's submit forms count in the API's `vendor_submit` bucket (issue 24 finding 4;
docs/security.md "Throttles"): one budget per organization, whichever path spends it, kept
in the shared cache every web process reads."""

from __future__ import annotations

import pytest
from django.test import Client

from ladders.models import Ladder
from portal.api.access import VendorSubmitThrottle
from submissions.models import Submission
from tests.submissions.support import make_catalog, token_client

pytestmark = pytest.mark.django_db

RATE = 2


@pytest.fixture(autouse=True)
def low_rate(monkeypatch):
    monkeypatch.setattr(VendorSubmitThrottle, "THROTTLE_RATES", {"vendor_submit": f"{RATE}/hour"})


@pytest.fixture
def catalog():
    return make_catalog()


def portal(user) -> Client:
    client = Client()
    assert client.login(username=user.username, password=f"{user.username}-password-123")
    return client


def api_submit(client, catalog, notes: str):
    return client.post(
        "/api/v1/submissions/", catalog.yaml(notes=notes), content_type="application/yaml"
    )


def test_api_submits_spend_the_portals_budget(cast, catalog):
    api = token_client(cast.org_a)
    for i in range(RATE):
        assert api_submit(api, catalog, f"api {i}").status_code == 201
    page = portal(cast.alice).post("/portal/submit/", {"config_text": catalog.yaml(notes="p")})
    assert page.status_code == 429
    assert int(page["Retry-After"]) >= 1
    assert b"Too many submissions" in page.content
    assert b"notes: p" in page.content  # the text is kept in the form
    assert Submission.objects.count() == RATE


def test_portal_submits_spend_the_apis_budget(cast, catalog):
    client = portal(cast.alice)
    for i in range(RATE):
        page = client.post("/portal/submit/", {"config_text": catalog.yaml(notes=f"p {i}")})
        assert page.status_code == 302, page.content[-2000:]
    response = api_submit(token_client(cast.org_a), catalog, "api")
    assert response.status_code == 429
    assert Submission.objects.count() == RATE


def test_a_refused_config_counts_as_the_api_counts_it(cast, catalog):
    client = portal(cast.alice)
    for _ in range(RATE):
        assert client.post("/portal/submit/", {"config_text": "a: [1"}).status_code == 400
    page = client.post("/portal/submit/", {"config_text": catalog.yaml()})
    assert page.status_code == 429
    assert not Submission.objects.exists()


def test_another_organization_has_its_own_budget(cast, catalog):
    api = token_client(cast.org_a)
    for i in range(RATE):
        assert api_submit(api, catalog, f"api {i}").status_code == 201
    other = portal(cast.bob).post("/portal/submit/", {"config_text": catalog.yaml(notes="b")})
    assert other.status_code == 302
    assert Submission.objects.filter(org=cast.org_b).count() == 1


def test_the_ladder_form_counts_in_the_same_bucket(cast, catalog):
    api = token_client(cast.org_a)
    for i in range(RATE):
        assert api_submit(api, catalog, f"api {i}").status_code == 201
    page = portal(cast.alice).post("/portal/ladders/new/", {"config_text": "name: x\n"})
    assert page.status_code == 429
    assert b"Too many submissions" in page.content
    assert not Ladder.objects.exists()
