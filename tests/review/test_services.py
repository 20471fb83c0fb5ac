"""Review decisions through the service layer: state, audit, notifications, refusals."""

import pytest
from django.core import mail

from leaderboard.models import Result
from review.services import (
    INVALIDATE,
    PUBLISH,
    REJECT,
    REQUEST_CHANGES,
    SUPERSEDE,
    ReviewError,
    ReviewForbidden,
    review_act,
    review_available_actions,
    review_invalidate,
    review_publish,
    review_reject,
    review_request_changes,
    review_supersede,
)
from submissions import constants as c
from submissions.models import AuditEvent, Membership, Notification, Submission
from tests.review.builders import CHECKS, make_reviewable
from tests.support.builders import make_user


def _events(sub):
    return list(
        AuditEvent.objects.filter(object_type="submissions.submission", object_id=str(sub.pk))
    )


@pytest.fixture
def commit(django_capture_on_commit_callbacks):
    """Run on_commit callbacks (the e-mails) as the transaction would on commit."""

    def run(fn, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return fn(**kwargs)

    return run


@pytest.mark.django_db
def test_publishing_creates_the_result_moves_the_submission_and_audits_the_reviewer(cast, commit):
    sub = make_reviewable(org=cast.org_a)
    result = commit(review_publish, submission=sub, actor=cast.rita, reason="checks look right")
    assert Result.objects.get(pk=result.pk).submission_id == sub.pk
    assert Submission.objects.get(pk=sub.pk).status == c.PUBLISHED
    assert sub.status == c.PUBLISHED
    last = _events(sub)[-1]
    assert (last.actor_id, last.to_state, last.reason) == (
        cast.rita.pk,
        c.PUBLISHED,
        "checks look right",
    )


@pytest.mark.django_db
def test_each_decision_notifies_the_vendor_org_in_the_portal_and_by_email(cast, commit):
    colleague = make_user("alice2", org=cast.org_a)
    sub = make_reviewable(org=cast.org_a)
    commit(
        review_request_changes,
        submission=sub,
        actor=cast.rita,
        reason="raise max_num_seqs; the run capped at 64",
    )
    note = Notification.objects.get(submission=sub)
    assert note.org_id == cast.org_a.pk and note.action == REQUEST_CHANGES
    assert "returned with a request for changes" in note.subject
    assert "raise max_num_seqs" in note.body and "resubmit" in note.body
    assert sorted(m.to[0] for m in mail.outbox) == sorted([cast.alice.email, colleague.email])
    assert all(len(m.to) == 1 for m in mail.outbox), "one message per member, no shared list"
    assert all("raise max_num_seqs" in m.body for m in mail.outbox)
    assert not any(cast.bob.email in m.to for m in mail.outbox)


@pytest.mark.django_db
def test_rejecting_records_the_reason_on_the_submission_and_the_audit_event(cast, commit):
    sub = make_reviewable(org=cast.org_b)
    commit(review_reject, submission=sub, actor=cast.rita, reason="claimed model not served")
    fresh = Submission.objects.get(pk=sub.pk)
    assert (fresh.status, fresh.status_reason) == (c.REJECTED, "claimed model not served")
    assert _events(sub)[-1].data == {"review_action": REJECT}
    assert [m.to for m in mail.outbox] == [[cast.bob.email]]


@pytest.mark.django_db
@pytest.mark.parametrize("action", [PUBLISH, REJECT, REQUEST_CHANGES])
@pytest.mark.parametrize("reason", ["", "   \n "])
def test_every_decision_without_a_reason_is_refused_and_changes_nothing(cast, action, reason):
    sub = make_reviewable(org=cast.org_a)
    with pytest.raises(ReviewError, match="a reason is required"):
        review_act(action=action, submission=sub, actor=cast.rita, reason=reason)
    assert Submission.objects.get(pk=sub.pk).status == c.IN_REVIEW
    assert not Notification.objects.exists() and not Result.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("action", [PUBLISH, REJECT, REQUEST_CHANGES])
def test_a_reviewer_who_belongs_to_the_vendor_org_is_refused_by_the_service(cast, action):
    Membership.objects.create(user=cast.rita, org=cast.org_a)
    sub = make_reviewable(org=cast.org_a)
    with pytest.raises(ReviewForbidden, match="member of Org A"):
        review_act(action=action, submission=sub, actor=cast.rita, reason="looks fine to me")
    assert Submission.objects.get(pk=sub.pk).status == c.IN_REVIEW
    assert not Result.objects.exists()
    assert review_available_actions(actor=cast.rita, submission=sub) == []


@pytest.mark.django_db
def test_a_reviewer_in_one_vendor_org_may_not_review_another_orgs_submission(cast):
    # the staff rule (docs/security.md "Staff"): staff and a vendor member, never both
    Membership.objects.create(user=cast.rita, org=cast.org_a)
    sub = make_reviewable(org=cast.org_b)
    with pytest.raises(ReviewForbidden, match="cannot be staff"):
        review_reject(submission=sub, actor=cast.rita, reason="fails fidelity")
    assert Submission.objects.get(pk=sub.pk).status == c.IN_REVIEW


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["alice", "bob"])
def test_a_vendor_calling_the_service_directly_is_refused(cast, who):
    sub = make_reviewable(org=cast.org_b)
    with pytest.raises(ReviewForbidden, match="not a reviewer"):
        review_publish(submission=sub, actor=getattr(cast, who), reason="ship it")
    assert Submission.objects.get(pk=sub.pk).status == c.IN_REVIEW


@pytest.mark.django_db
def test_an_anonymous_actor_is_refused(cast):
    from django.contrib.auth.models import AnonymousUser

    sub = make_reviewable(org=cast.org_b)
    with pytest.raises(ReviewForbidden, match="anonymous"):
        review_reject(submission=sub, actor=AnonymousUser(), reason="x")


@pytest.mark.django_db
def test_publishing_a_run_whose_verification_failed_is_refused(cast):
    checks = [{**CHECKS[0], "status": "fail", "name": "model_identity"}]
    sub = make_reviewable(org=cast.org_a, checks=checks, verification="fail")
    with pytest.raises(ReviewError, match=r"verification failed \(model_identity\)"):
        review_publish(submission=sub, actor=cast.rita, reason="ok")
    assert Submission.objects.get(pk=sub.pk).status == c.IN_REVIEW


@pytest.mark.django_db
def test_a_decision_on_a_submission_in_the_wrong_state_names_the_state_needed(cast):
    sub = make_reviewable(org=cast.org_a, status=c.RUNNING)
    with pytest.raises(ReviewError, match="is running; reject needs it to be in review"):
        review_reject(submission=sub, actor=cast.rita, reason="no")


@pytest.mark.django_db
def test_a_stale_copy_cannot_decide_twice(cast, commit):
    sub = make_reviewable(org=cast.org_a)
    stale = Submission.objects.get(pk=sub.pk)
    commit(review_reject, submission=sub, actor=cast.rita, reason="first")
    with pytest.raises(ReviewError, match="is rejected"):
        review_request_changes(submission=stale, actor=cast.rita, reason="second")
    assert Notification.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("action", "service", "state"),
    [
        (SUPERSEDE, review_supersede, c.SUPERSEDED),
        (INVALIDATE, review_invalidate, c.INVALIDATED),
    ],
)
def test_a_published_result_can_be_retired_with_a_reason_kept(cast, commit, action, service, state):
    sub = make_reviewable(org=cast.org_a)
    commit(review_publish, submission=sub, actor=cast.rita, reason="verified")
    mail.outbox.clear()
    result = commit(service, submission=sub, actor=cast.rita, reason="newer engine build")
    assert Result.objects.get(pk=result.pk).status == state
    assert Result.objects.get(pk=result.pk).status_reason == "newer engine build"
    assert Submission.objects.get(pk=sub.pk).status == state
    assert Notification.objects.filter(submission=sub, action=action).count() == 1
    assert [m.to for m in mail.outbox] == [[cast.alice.email]]
    assert _events(sub)[-1].to_state == state


@pytest.mark.django_db
def test_available_actions_follow_the_state(cast, commit):
    sub = make_reviewable(org=cast.org_a)
    names = [a.name for a in review_available_actions(actor=cast.rita, submission=sub)]
    assert names == ["publish", "request_changes", "reject", "rerun"]
    commit(review_publish, submission=sub, actor=cast.rita, reason="verified")
    names = [a.name for a in review_available_actions(actor=cast.rita, submission=sub)]
    assert names == ["supersede", "invalidate", "redact"]
    assert review_available_actions(actor=cast.alice, submission=sub) == []


def _private_test_sets():
    """Rows for the private test sets, so dispatch finds them instead of generating one."""
    from django.core.files.base import ContentFile
    from django.core.files.storage import storages

    from catalog.datasets import SIZE_SMALL, SIZE_STANDARD, test_set_spec
    from catalog.models import Dataset

    storage = storages["datasets"]
    for i, size in enumerate((SIZE_SMALL, SIZE_STANDARD)):
        spec = test_set_spec(size)
        key = f"test-review/{spec.name}.jsonl.gz"
        if not storage.exists(key):
            storage.save(key, ContentFile(b"placeholder; these tests never run the trials"))
        Dataset.objects.create(
            name=spec.name,
            version=spec.version,
            visibility=Dataset.VISIBILITY_PRIVATE,
            sha256=f"{i}" * 64,
            storage_key=key,
        )


SIMULATED_CONFIG = {"launcher": {"simulated": {"profile": "tiny", "seed": 1}}}


@pytest.mark.django_db
@pytest.mark.parametrize("state", [c.IN_REVIEW, c.FAILED])
def test_a_rerun_goes_through_dispatch_with_the_reviewers_reason_on_the_timeline(
    cast, django_capture_on_commit_callbacks, state
):
    from runs.models import BenchmarkRun

    _private_test_sets()
    sub = make_reviewable(org=cast.org_a, status=state, config=SIMULATED_CONFIG)
    before = set(BenchmarkRun.objects.filter(submission=sub).values_list("pk", flat=True))
    # Callbacks are captured, not run: one would enqueue the run on the broker.
    with django_capture_on_commit_callbacks(execute=False):
        run = review_act(
            action="rerun", submission=sub, actor=cast.rita, reason="noisy confirmation trial"
        )
    assert run.pk not in before and run.status == BenchmarkRun.STATUS_PENDING
    assert Submission.objects.get(pk=sub.pk).status == c.QUEUED
    events = _events(sub)
    mine = [e for e in events if e.action == "review_rerun"]
    assert [(e.actor_id, e.reason, e.from_state) for e in mine] == [
        (cast.rita.pk, "noisy confirmation trial", state)
    ]
    assert events[-1].to_state == c.QUEUED
    assert Notification.objects.get(submission=sub).action == "rerun"


@pytest.mark.django_db
def test_a_rerun_that_dispatch_cannot_prepare_is_refused_and_leaves_no_trace(cast):
    sub = make_reviewable(org=cast.org_a, status=c.FAILED, config={})
    events = len(_events(sub))
    with pytest.raises(ReviewError, match="cannot re-run: the config has no launcher"):
        review_act(action="rerun", submission=sub, actor=cast.rita, reason="try again")
    assert Submission.objects.get(pk=sub.pk).status == c.FAILED
    assert len(_events(sub)) == events
    assert not Notification.objects.exists()
