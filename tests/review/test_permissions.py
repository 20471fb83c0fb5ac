"""Only staff see the console: every page and every action, tried by each of the fixed cast."""

import pytest
from django.urls import reverse

from leaderboard.models import Result
from review.services import ACTIONS
from submissions import constants as c
from submissions.models import AuditEvent, Membership, Notification, Submission
from tests.review.builders import make_reviewable

PAGES = ["queue", "submission", "run"]


def _page_url(name, sub):
    if name == "queue":
        return reverse("review:queue")
    if name == "submission":
        return reverse("review:submission", args=[sub.pk])
    return reverse("review:run", args=[sub.runs.get().pk])


def _login(client, cast, who):
    if who != "anonymous":
        client.force_login(getattr(cast, who))


@pytest.mark.django_db
@pytest.mark.parametrize("page", PAGES)
def test_anonymous_visitors_are_sent_to_the_login_page(client, cast, page):
    sub = make_reviewable(org=cast.org_a)
    url = _page_url(page, sub)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/review/")


@pytest.mark.django_db
@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("who", ["alice", "bob"])
def test_vendors_get_403_on_every_console_page_even_for_their_own_submission(
    client, cast, page, who
):
    sub = make_reviewable(org=cast.org_a)
    _login(client, cast, who)
    response = client.get(_page_url(page, sub))
    assert response.status_code == 403
    assert b"Org A" not in response.content


@pytest.mark.django_db
@pytest.mark.parametrize("page", PAGES)
def test_reviewer_rita_sees_every_console_page(client, cast, page):
    sub = make_reviewable(org=cast.org_a)
    _login(client, cast, "rita")
    response = client.get(_page_url(page, sub))
    assert response.status_code == 200
    assert f"#{sub.pk}".encode() in response.content


@pytest.mark.django_db
@pytest.mark.parametrize("action", list(ACTIONS))
@pytest.mark.parametrize("who", ["anonymous", "alice", "bob"])
def test_nobody_but_staff_can_post_any_action(client, cast, action, who):
    status = c.PUBLISHED if action in ("supersede", "invalidate") else c.IN_REVIEW
    sub = make_reviewable(org=cast.org_a, status=status)
    _login(client, cast, who)
    events = AuditEvent.objects.count()
    response = client.post(
        reverse("review:decide", args=[sub.pk, action]), {f"{action}-reason": "let me in"}
    )
    assert response.status_code == (302 if who == "anonymous" else 403)
    if who == "anonymous":
        assert response["Location"].startswith("/accounts/login/")
    assert Submission.objects.get(pk=sub.pk).status == status
    assert AuditEvent.objects.count() == events
    assert not Notification.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["publish", "reject", "request_changes"])
def test_a_staff_member_of_the_vendor_org_gets_403_on_posting_and_sees_no_forms(
    client, cast, action
):
    Membership.objects.create(user=cast.rita, org=cast.org_a)
    sub = make_reviewable(org=cast.org_a)
    client.force_login(cast.rita)
    # the staff rule (docs/security.md "Staff"): a vendor member is not a reviewer at all
    page = client.get(reverse("review:submission", args=[sub.pk]))
    assert page.status_code == 403
    assert b'data-action="publish"' not in page.content
    response = client.post(
        reverse("review:decide", args=[sub.pk, action]), {f"{action}-reason": "mine is great"}
    )
    assert response.status_code == 403
    assert Submission.objects.get(pk=sub.pk).status == c.IN_REVIEW
    assert not Result.objects.exists()


@pytest.mark.django_db
def test_actions_only_accept_post(client, cast):
    sub = make_reviewable(org=cast.org_a)
    client.force_login(cast.rita)
    response = client.get(reverse("review:decide", args=[sub.pk, "reject"]))
    assert response.status_code == 405
    assert Submission.objects.get(pk=sub.pk).status == c.IN_REVIEW


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("who", "shown"), [("anonymous", False), ("alice", False), ("bob", False), ("rita", True)]
)
def test_the_review_nav_link_shows_on_public_pages_for_staff_only(client, cast, who, shown):
    _login(client, cast, who)
    html = client.get(reverse("home")).content.decode()
    assert ('<a href="/review/">Review</a>' in html) is shown
