"""The one staff rule (issue 24 finding 7; docs/security.md "Staff"): a member of a vendor
organization is never staff (reviewer or admin). The admin refuses to make one, and an
account that is both anyway (made before the rule, or outside the admin) is refused by the
review console, the admin site and the review service."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from review.services import ReviewForbidden, review_reject
from submissions import constants as c
from submissions.models import Membership, Organization, Submission
from tests.review.builders import make_reviewable

pytestmark = pytest.mark.django_db
User = get_user_model()


@pytest.fixture
def root(cast) -> Client:
    admin = User.objects.create_superuser("root", "root@example.test", "root-password-123")
    client = Client()
    client.force_login(admin)
    return client


def _user_form(user, **changes) -> dict:
    data = {
        "username": user.username,
        "first_name": "",
        "last_name": "",
        "email": user.email,
        "is_active": "on",
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        "initial-date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "initial-date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        "last_login_0": "",
        "last_login_1": "",
    }
    data.update(changes)
    return data


@pytest.mark.parametrize("flag", ["is_staff", "is_superuser"])
def test_the_admin_refuses_to_make_a_vendor_member_staff(cast, root, flag):
    url = f"/admin/auth/user/{cast.alice.pk}/change/"
    response = root.post(url, _user_form(cast.alice, **{flag: "on"}))
    assert response.status_code == 200  # the form again, with the error
    assert "cannot be staff" in response.content.decode()
    cast.alice.refresh_from_db()
    assert not cast.alice.is_staff and not cast.alice.is_superuser


def test_the_admin_still_makes_a_non_member_staff(cast, root):
    carol = User.objects.create_user("carol", "carol@example.test", "carol-password-123")
    response = root.post(f"/admin/auth/user/{carol.pk}/change/", _user_form(carol, is_staff="on"))
    assert response.status_code == 302, response.content[-3000:]
    carol.refresh_from_db()
    assert carol.is_staff


def test_the_admin_refuses_to_add_a_reviewer_to_an_organization(cast, root):
    org = Organization.objects.create(name="Org C", slug="org-c")
    data = {
        "name": org.name,
        "slug": org.slug,
        "memberships-TOTAL_FORMS": "1",
        "memberships-INITIAL_FORMS": "0",
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
        "memberships-0-user": str(cast.rita.pk),
        "memberships-0-role": Membership.ROLE_MEMBER,
        "memberships-0-org": str(org.pk),
    }
    url = f"/admin/submissions/organization/{org.pk}/change/"
    response = root.post(url, data)
    assert response.status_code == 200
    assert "cannot be staff" in response.content.decode()
    assert not Membership.objects.filter(user=cast.rita).exists()
    data["memberships-0-user"] = str(cast.bob.pk)  # a vendor may belong to several
    assert root.post(url, data).status_code == 302
    assert Membership.objects.filter(user=cast.bob, org=org).exists()


@pytest.fixture
def insider(cast):
    """Alice (org A) made staff around the admin's check, as an old account could be."""
    User.objects.filter(pk=cast.alice.pk).update(is_staff=True)
    cast.alice.refresh_from_db()
    client = Client()
    client.force_login(cast.alice)
    return client


def test_the_console_refuses_a_staff_vendor_member_everywhere(cast, insider):
    own = make_reviewable(org=cast.org_a)
    other = make_reviewable(org=cast.org_b)
    for url in (
        reverse("review:queue"),
        reverse("review:submission", args=[other.pk]),
        reverse("review:submission", args=[own.pk]),
    ):
        response = insider.get(url)
        assert response.status_code == 403, url
        assert b"Org B" not in response.content
    refused = insider.post(
        reverse("review:decide", args=[other.pk, "reject"]), {"reject-reason": "not mine"}
    )
    assert refused.status_code == 403
    assert Submission.objects.get(pk=other.pk).status == c.IN_REVIEW


def test_the_admin_site_refuses_a_staff_vendor_member(cast, insider):
    make_reviewable(org=cast.org_b)
    for url in ("/admin/", "/admin/submissions/submission/"):
        response = insider.get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], url


def test_the_review_service_refuses_a_staff_vendor_member_for_any_organization(cast, insider):
    other = make_reviewable(org=cast.org_b)
    with pytest.raises(ReviewForbidden, match="cannot be staff"):
        review_reject(submission=other, actor=cast.alice, reason="not mine to judge")
    assert Submission.objects.get(pk=other.pk).status == c.IN_REVIEW


def test_a_reviewer_outside_every_organization_still_uses_the_console(cast):
    sub = make_reviewable(org=cast.org_b)
    client = Client()
    client.force_login(cast.rita)
    assert client.get(reverse("review:submission", args=[sub.pk])).status_code == 200


def test_no_command_makes_an_admin_a_vendor_member(cast):
    from submissions.services.users import UserError, vendor_user_create

    # a superuser without is_staff (the old check looked at is_staff only)
    User.objects.create_user("boss", "boss@example.test", "boss-password-123", is_superuser=True)
    with pytest.raises(UserError, match="reviewer"):
        vendor_user_create(org=cast.org_a, username="boss")
    assert not Membership.objects.filter(user__username="boss").exists()
