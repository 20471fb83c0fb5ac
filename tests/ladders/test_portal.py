"""The vendor portal's ladder form and pages (docs/ladders.md "Submitting (portal)",
ladders/portal.py): the form goes through the API's service (the rungs' submissions exist
afterwards), an invalid body shows the rung and field path beside its line and creates
nothing, the pages are the organization's own (another's ladder is a 404) and need a
login."""

from __future__ import annotations

import json

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from ladders.models import Ladder
from submissions import constants as c
from submissions.models import Submission
from tests.ladders.test_ladders import body
from tests.submissions.support import make_catalog

pytestmark = pytest.mark.django_db

NEW = "/portal/ladders/new/"


def logged_in(user, **kwargs) -> Client:
    client = Client(**kwargs)
    assert client.login(username=user.username, password=f"{user.username}-password-123")
    return client


def submit(client: Client, text: str, key: str = "") -> object:
    return client.post(NEW, {"config_text": text, "idempotency_key": key})


def bad_rungs() -> list[dict]:
    return [
        {
            "name": "engine upgrade",
            "description": "newer engine",
            "patch": {"engine": {"version": "0.5.5"}},
        },
        {
            "name": "MTP k=0",
            "description": "draft no tokens",
            "patch": {"speculative": {"method": "mtp", "draft_tokens": 0}},
        },
    ]


def test_anonymous_is_sent_to_login_from_every_ladder_page(cast) -> None:
    cat = make_catalog()
    ladder = Ladder.objects.create(org=cast.org_a, model=cat.model, hardware=cat.hardware, name="x")
    client = Client()
    for method, path in [
        ("get", "/portal/ladders/"),
        ("get", NEW),
        ("post", NEW),
        ("get", f"/portal/ladders/{ladder.pk}/"),
    ]:
        response = getattr(client, method)(path)
        assert response.status_code == 302, path
        assert response["Location"].startswith("/accounts/login/?next="), path
    assert Ladder.objects.count() == 1


def test_the_form_creates_a_ladder_through_the_service_and_lands_on_its_page(cast) -> None:
    cat = make_catalog()
    client = logged_in(cast.alice)
    form = client.get(NEW)
    assert form.status_code == 200 and b'name="csrfmiddlewaretoken"' in form.content
    response = submit(client, yaml.safe_dump(body(cat), sort_keys=False))
    assert response.status_code == 302, response.content.decode()[-2000:]
    ladder = Ladder.objects.get()
    assert response["Location"] == f"/portal/ladders/{ladder.pk}/"
    assert ladder.org == cast.org_a and ladder.created_by == cast.alice
    rungs = list(ladder.rungs.order_by("index"))
    assert [r.name for r in rungs] == ["as shipped", "engine upgrade", "no notes"]
    subs = Submission.objects.filter(pk__in=[r.submission_id for r in rungs])
    assert subs.count() == 3 and {s.status for s in subs} == {c.VALIDATED}
    assert {s.org_id for s in subs} == {cast.org_a.pk}

    page = client.get(response["Location"])
    html = page.content.decode()
    assert page.status_code == 200 and "tiny what-if" in html
    for rung in rungs:
        assert f'href="/portal/submissions/{rung.submission_id}/"' in html
    assert html.count('<td class="js-status">Validated</td>') == 3  # each rung's state
    assert "engine upgrade, no notes" in html  # the last rung's changes applied
    assert f'href="/ladders/{ladder.pk}/"' not in html  # not published yet

    Ladder.objects.filter(pk=ladder.pk).update(
        status=Ladder.STATUS_PUBLISHED, published_at=timezone.now()
    )
    html = client.get(f"/portal/ladders/{ladder.pk}/").content.decode()
    assert f'href="/ladders/{ladder.pk}/"' in html

    listing = client.get("/portal/ladders/").content.decode()
    assert f'href="/portal/ladders/{ladder.pk}/"' in listing and "tiny what-if" in listing
    assert 'href="/portal/ladders/"' in client.get("/portal/").content.decode()


def test_an_uploaded_json_ladder_with_two_orders(cast) -> None:
    cat = make_catalog()
    client = logged_in(cast.alice)
    upload = SimpleUploadedFile(
        "ladder.json", json.dumps(body(cat, orders=["forward", "reverse"])).encode()
    )
    response = client.post(NEW, {"config_file": upload})
    assert response.status_code == 302, response.content.decode()[-2000:]
    ladder = Ladder.objects.get()
    assert ladder.orders == ["forward", "reverse"] and ladder.rungs.count() == 6
    html = client.get(response["Location"]).content.decode()
    assert 'id="order-forward"' in html and 'id="order-reverse"' in html
    assert "4 submissions" in html  # baseline and full rung shared by both orders


def test_an_invalid_rung_shows_the_rung_and_field_path_and_creates_nothing(cast) -> None:
    cat = make_catalog()
    client = logged_in(cast.alice)
    text = yaml.safe_dump(body(cat, rungs=bad_rungs()), sort_keys=False)
    response = submit(client, text)
    assert response.status_code == 400
    html = response.content.decode()
    path = "rungs.1.patch.speculative.draft_tokens"
    assert f'class="field-error" data-path="{path}"' in html, html[-3000:]
    assert "(rung “MTP k=0”)" in html
    # beside the line of the rung's patch that sets it (the baseline config has one too)
    line = [i for i, t in enumerate(text.splitlines(), 1) if "draft_tokens: 0" in t][-1]
    item = html.split(f'<li value="{line}"', 1)[1].split("</li>", 1)[0]
    assert f'data-path="{path}"' in item
    assert not Ladder.objects.exists() and not Submission.objects.exists()
    # the text comes back in the form, with a fresh key
    assert "draft no tokens" in html and 'name="idempotency_key"' in html


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("name: [unclosed", "the ladder body is not valid YAML"),
        ("- a list", "the ladder body must be a mapping"),
        ("name: x\nbaseline: {result: 12345}\nrungs: []\n", "baseline.result"),
        (
            "name: x\nbaseline: {config: {}}\nrungs: [{name: a, description: b, patch: "
            "{notes: !!set {a: null}}}]\n",
            "tags are not accepted",  # the one YAML reader refuses it with its line
        ),
        ("", "Paste a ladder or choose a file."),
    ],
)
def test_unreadable_or_wrong_bodies_are_a_400_naming_the_problem(cast, text, shown) -> None:
    client = logged_in(cast.alice)
    response = submit(client, text)
    assert response.status_code == 400
    assert shown in response.content.decode()
    assert not Ladder.objects.exists() and not Submission.objects.exists()


def test_a_patch_may_not_change_the_conditions(cast) -> None:
    cat = make_catalog()
    client = logged_in(cast.alice)
    rungs = [
        {"name": "more agents", "description": "d", "patch": {"benchmark": {"max_concurrency": 8}}}
    ]
    html = submit(client, yaml.safe_dump(body(cat, rungs=rungs))).content.decode()
    assert 'data-path="rungs.0.patch.benchmark.max_concurrency"' in html
    assert "(rung “more agents”)" in html and "identical conditions" in html


def test_another_organizations_ladder_is_a_404(cast) -> None:
    cat = make_catalog()
    alice = logged_in(cast.alice)
    submit(alice, yaml.safe_dump(body(cat)))
    ladder = Ladder.objects.get()
    bob = logged_in(cast.bob)
    assert bob.get(f"/portal/ladders/{ladder.pk}/").status_code == 404
    assert f"/portal/ladders/{ladder.pk}/" not in bob.get("/portal/ladders/").content.decode()
    assert alice.get(f"/portal/ladders/{ladder.pk}/").status_code == 200
    # a staff account with no vendor organization has no portal
    assert logged_in(cast.rita).get("/portal/ladders/").status_code == 403


def test_one_rendered_form_submits_once(cast) -> None:
    cat = make_catalog()
    client = logged_in(cast.alice)
    key = "ab" * 16
    first = submit(client, yaml.safe_dump(body(cat)), key)
    again = submit(client, yaml.safe_dump(body(cat)), key)
    assert first.status_code == again.status_code == 302
    assert first["Location"] == again["Location"]
    assert Ladder.objects.count() == 1 and Submission.objects.count() == 3


def test_the_form_needs_the_csrf_token(cast) -> None:
    cat = make_catalog()
    client = logged_in(cast.alice, enforce_csrf_checks=True)
    assert submit(client, yaml.safe_dump(body(cat))).status_code == 403
    assert not Ladder.objects.exists()
