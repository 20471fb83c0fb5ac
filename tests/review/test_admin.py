"""The Django admin decides through the review services: change permission in the admin,
then the console's rules (a reviewer outside the submitting organization, a reason, the
vendor notified); there is no bulk publish (docs/security.md "Review")."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from leaderboard.models import Result
from runs.models import BenchmarkRun
from submissions import constants as c
from submissions.models import Notification
from tests.review.builders import make_reviewable
from tests.support.builders import make_user

pytestmark = pytest.mark.django_db


def _staff(username: str, *, org=None, codenames=("view_benchmarkrun",)):
    user = make_user(username, org=org, staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def _review_url(sub) -> str:
    run = BenchmarkRun.objects.get(submission=sub)
    return f"/admin/runs/benchmarkrun/{run.pk}/review/"


def test_a_staff_member_of_the_submitting_org_cannot_publish_through_the_admin(cast, client):
    sub = make_reviewable(org=cast.org_a)
    insider = _staff(
        "insider", org=cast.org_a, codenames=("view_benchmarkrun", "change_benchmarkrun")
    )
    client.force_login(insider)
    response = client.post(
        _review_url(sub), {"decision": "approve", "reason": "looks fine"}, follow=True
    )
    # the staff rule (docs/security.md "Staff"): the admin site refuses a vendor member
    assert response.status_code == 200
    assert response.redirect_chain[-1][0].startswith("/admin/login/")
    sub.refresh_from_db()
    assert sub.status == c.IN_REVIEW and not Result.objects.exists()


def test_view_permission_alone_cannot_decide_in_the_admin(cast, client):
    sub = make_reviewable(org=cast.org_a)
    client.force_login(_staff("viewer"))
    response = client.post(_review_url(sub), {"decision": "reject", "reason": "no"})
    assert response.status_code == 403
    sub.refresh_from_db()
    assert sub.status == c.IN_REVIEW


def test_the_admin_has_no_bulk_publish_action(cast, client):
    make_reviewable(org=cast.org_a)
    client.force_login(_staff("bulk", codenames=("view_benchmarkrun", "change_benchmarkrun")))
    html = client.get("/admin/runs/benchmarkrun/").content.decode()
    assert "approve_selected" not in html and 'name="action"' not in html


def test_an_admin_decision_needs_a_reason_and_notifies_the_vendor(cast, client):
    sub = make_reviewable(org=cast.org_a)
    reviewer = _staff("rev", codenames=("view_benchmarkrun", "change_benchmarkrun"))
    client.force_login(reviewer)
    refused = client.post(_review_url(sub), {"decision": "approve", "reason": ""})
    assert refused.status_code == 200 and Result.objects.count() == 0
    done = client.post(
        _review_url(sub), {"decision": "approve", "reason": "checks pass", "label": "L"}
    )
    assert done.status_code == 302
    sub.refresh_from_db()
    assert sub.status == c.PUBLISHED
    assert Result.objects.get(submission=sub).label == "L"
    assert Notification.objects.filter(org=cast.org_a, action="publish").exists()


@pytest.mark.parametrize("who", ["anonymous", "alice", "bob", "rita"])
def test_the_fixed_cast_cannot_decide_through_the_admin_without_the_change_permission(
    cast, client, who
):
    sub = make_reviewable(org=cast.org_a)
    if who != "anonymous":
        client.force_login(getattr(cast, who))
    response = client.post(_review_url(sub), {"decision": "approve", "reason": "let me in"})
    if who == "rita":  # staff, but no change permission on runs
        assert response.status_code == 403
    else:  # not staff: the admin sends them to its login page
        assert response.status_code == 302 and "/admin/login/" in response["Location"]
    sub.refresh_from_db()
    assert sub.status == c.IN_REVIEW and not Result.objects.exists()
    assert not Notification.objects.exists()
