import threading

import pytest
from django.db import connection

from demo.synthetic import make_org, make_submission
from submissions import constants as c
from submissions.models import AuditEvent, Submission
from submissions.services.lifecycle import TransitionError, submission_transition

ALL_EDGES = [(src, dst) for src, dsts in c.ALLOWED_TRANSITIONS.items() for dst in dsts]


@pytest.mark.django_db
@pytest.mark.parametrize(("src", "dst"), ALL_EDGES)
def test_every_allowed_transition_updates_the_row_and_writes_one_audit_event(src, dst):
    sub = make_submission(org=make_org(), status=src)
    submission_transition(submission=sub, to=dst, reason="because", actor_label="test")
    assert Submission.objects.get(pk=sub.pk).status == dst
    events = AuditEvent.objects.filter(object_type="submissions.submission", object_id=str(sub.pk))
    assert [(e.from_state, e.to_state, e.reason) for e in events] == [(src, dst, "because")]


REFUSED = [
    (src, dst)
    for src in c.ALL_STATES
    for dst in c.ALL_STATES
    if dst not in c.ALLOWED_TRANSITIONS[src]
]


@pytest.mark.django_db
@pytest.mark.parametrize(("src", "dst"), REFUSED[::7])  # a spread sample of the 190 refusals
def test_a_refused_transition_raises_and_changes_nothing(src, dst):
    sub = make_submission(org=make_org(), status=src)
    with pytest.raises(TransitionError, match=f"from '{src}' to '{dst}'"):
        submission_transition(submission=sub, to=dst, reason="x")
    assert Submission.objects.get(pk=sub.pk).status == src
    assert not AuditEvent.objects.exists()


@pytest.mark.django_db
def test_final_states_allow_no_transition():
    for state in c.FINAL_STATES:
        assert c.ALLOWED_TRANSITIONS[state] == ()
    sub = make_submission(org=make_org(), status=c.WITHDRAWN)
    with pytest.raises(TransitionError, match="it is final"):
        submission_transition(submission=sub, to=c.SUBMITTED)


@pytest.mark.django_db
def test_rejection_without_a_reason_is_refused():
    sub = make_submission(org=make_org(), status=c.IN_REVIEW)
    with pytest.raises(TransitionError, match="needs a reason"):
        submission_transition(submission=sub, to=c.REJECTED, reason="  ")
    assert Submission.objects.get(pk=sub.pk).status == c.IN_REVIEW


@pytest.mark.django_db
def test_a_stale_copy_cannot_transition_a_row_that_moved_on():
    sub = make_submission(org=make_org(), status=c.QUEUED)
    stale = Submission.objects.get(pk=sub.pk)
    submission_transition(submission=sub, to=c.RUNNING)
    with pytest.raises(TransitionError, match="no longer 'queued'"):
        submission_transition(submission=stale, to=c.WITHDRAWN)
    assert Submission.objects.get(pk=sub.pk).status == c.RUNNING
    assert AuditEvent.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_attempts_at_the_same_transition_have_exactly_one_winner():
    assert connection.vendor == "postgresql", "this race is only meaningful on PostgreSQL"
    sub = make_submission(org=make_org(), status=c.IN_REVIEW)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def attempt() -> None:
        mine = Submission.objects.get(pk=sub.pk)
        barrier.wait()
        try:
            submission_transition(submission=mine, to=c.PUBLISHED, actor_label="racer")
            outcomes.append("won")
        except TransitionError:
            outcomes.append("lost")
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["lost"] * 7 + ["won"]
    assert AuditEvent.objects.filter(to_state=c.PUBLISHED).count() == 1
    assert Submission.objects.get(pk=sub.pk).status == c.PUBLISHED
