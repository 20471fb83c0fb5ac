"""Review decisions: every action a reviewer takes on a submission, and the vendor notices.

Each `review_*` service checks that the actor may act (staff, and not a member of the
submission's organization), requires a reason, calls the service that owns the state change
(`leaderboard.publishing`, `runs.dispatch`, the lifecycle), and notifies the vendor's
members in the portal and by e-mail. The state change itself writes the AuditEvent.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import transaction

from submissions import constants as c
from submissions.models import Membership, Notification, Submission
from submissions.services.lifecycle import TransitionError, audit_record, submission_transition
from submissions.services.users import staff_rule_problem

logger = logging.getLogger(__name__)

PUBLISH = "publish"
REJECT = "reject"
REQUEST_CHANGES = "request_changes"
RERUN = "rerun"
SUPERSEDE = "supersede"
INVALIDATE = "invalidate"
APPROVE_LAUNCH = "approve_launch"
REDACT = "redact"


@dataclass(frozen=True, slots=True)
class ReviewAction:
    name: str
    label: str  # button text
    from_states: tuple[str, ...]
    to_state: str
    # what the vendor reads: "Submission #12 … was <done>"
    done: str
    danger: bool = False


ACTIONS: dict[str, ReviewAction] = {
    a.name: a
    for a in (
        ReviewAction(PUBLISH, "Publish", (c.IN_REVIEW,), c.PUBLISHED, "published"),
        ReviewAction(
            REQUEST_CHANGES,
            "Request changes",
            (c.IN_REVIEW,),
            c.CHANGES_REQUESTED,
            "returned with a request for changes",
        ),
        ReviewAction(
            APPROVE_LAUNCH,
            "Approve launch",
            (c.AWAITING_APPROVAL,),
            c.QUEUED,
            "approved to run its launch",
        ),
        ReviewAction(
            REJECT,
            "Reject",
            (c.IN_REVIEW, c.AWAITING_APPROVAL),
            c.REJECTED,
            "rejected",
            danger=True,
        ),
        ReviewAction(RERUN, "Re-run", (c.IN_REVIEW, c.FAILED), c.QUEUED, "queued for a re-run"),
        ReviewAction(
            SUPERSEDE,
            "Supersede",
            (c.PUBLISHED,),
            c.SUPERSEDED,
            "marked as superseded",
        ),
        ReviewAction(
            INVALIDATE,
            "Invalidate",
            (c.PUBLISHED,),
            c.INVALIDATED,
            "invalidated",
            danger=True,
        ),
        # no state change: the result's public config is rewritten (docs/security.md
        # "Secrets in configs")
        ReviewAction(
            REDACT,
            "Redact public config",
            (c.PUBLISHED, c.SUPERSEDED),
            "",
            "redacted in its public configuration",
            danger=True,
        ),
    )
}


class ReviewError(Exception):
    """An action that cannot be taken; the message is shown to the reviewer."""


class ReviewForbidden(ReviewError):
    """The actor may not act on this submission at all."""


def review_conflict(*, actor, submission: Submission) -> bool:
    """True when the actor belongs to the submission's organization."""
    return Membership.objects.filter(user_id=actor.pk, org_id=submission.org_id).exists()


def review_assert_can_act(*, actor, submission: Submission) -> None:
    """Raise ReviewForbidden unless `actor` is active staff outside the submission's org."""
    if actor is None or not getattr(actor, "pk", None):
        raise ReviewForbidden("an anonymous user cannot review submissions")
    if not (actor.is_active and actor.is_staff):
        raise ReviewForbidden(f"{actor.get_username()} is not a reviewer")
    problem = staff_rule_problem(actor)  # docs/security.md "Staff"
    if problem:
        raise ReviewForbidden(problem)
    if review_conflict(actor=actor, submission=submission):
        raise ReviewForbidden(
            f"{actor.get_username()} is a member of {submission.org}, so cannot review "
            "that organization's submissions"
        )


def review_available_actions(*, actor, submission: Submission) -> list[ReviewAction]:
    """The actions the actor could take on the submission in its current state."""
    try:
        review_assert_can_act(actor=actor, submission=submission)
    except ReviewForbidden:
        return []
    return [a for a in ACTIONS.values() if submission.status in a.from_states]


def _prepare(*, action: str, submission: Submission, actor, reason: str) -> Submission:
    """Common checks; returns a fresh copy of the submission locked for this transaction."""
    # of=("self",): lock the submission row only, not the org and catalog rows joined in.
    rows = Submission.objects.select_for_update(of=("self",))
    return _check(action=action, submission=submission, actor=actor, reason=reason, rows=rows)


def _check(*, action: str, submission: Submission, actor, reason: str, rows=None) -> Submission:
    """The common checks on a fresh copy of the submission (read from ``rows``: locked by
    `_prepare`, unlocked before a transaction); returns that copy."""
    review_assert_can_act(actor=actor, submission=submission)
    if not reason or not reason.strip():
        raise ReviewError("a reason is required")
    rows = Submission.objects.all() if rows is None else rows
    fresh = rows.select_related("org", "model", "hardware").get(pk=submission.pk)
    spec = ACTIONS[action]
    if fresh.status not in spec.from_states:
        raise ReviewError(
            f"submission #{fresh.pk} is {fresh.get_status_display().lower()}; "
            f"{spec.label.lower()} needs it to be "
            + " or ".join(dict(c.STATUS_CHOICES)[s].lower() for s in spec.from_states)
        )
    return fresh


def _reviewable_run(submission: Submission):
    """The run a decision is about: the submission's latest finished run."""
    from runs.models import BenchmarkRun

    run = BenchmarkRun.objects.done().latest_for(submission)
    if run is None:
        raise ReviewError(f"submission #{submission.pk} has no finished run to publish")
    return run


def review_publish(
    *, submission: Submission, actor, reason: str, label: str | None = None
):  # -> leaderboard.models.Result
    """Publish the submission's latest finished run as a Result.

    A run whose verification failed is refused: reject it or re-run it instead.
    """
    from leaderboard.publishing import PublishError, publication_prepare, result_publish

    # The same checks unlocked first, then what the publish writes computed (the raw files
    # read back and hashed, the points): outside the write transaction, which then holds
    # the lock for the inserts only (docs/pipeline.md "Contention").
    checked = _check(action=PUBLISH, submission=submission, actor=actor, reason=reason)
    run = _reviewable_run(checked)
    try:
        publication = publication_prepare(submission=checked, run=run)
    except PublishError as exc:
        raise ReviewError(str(exc)) from exc
    with transaction.atomic():
        fresh = _prepare(action=PUBLISH, submission=submission, actor=actor, reason=reason)
        if _reviewable_run(fresh).pk != run.pk:
            raise ReviewError(f"submission #{fresh.pk} got another finished run; review it again")
        try:
            result = result_publish(
                submission=fresh,
                run=run,
                actor=actor,
                label=label or None,
                reason=reason.strip(),
                publication=publication,
            )
        except PublishError as exc:
            raise ReviewError(str(exc)) from exc
        _sync(submission, fresh)
        notification_send(submission=fresh, action=PUBLISH, actor=actor, reason=reason)
    return result


def review_reject(*, submission: Submission, actor, reason: str) -> Submission:
    """Reject the submission for good (the vendor may still file a new one)."""
    return _simple_transition(REJECT, submission=submission, actor=actor, reason=reason)


def review_request_changes(*, submission: Submission, actor, reason: str) -> Submission:
    """Return the submission to the vendor, who can resubmit an amended config."""
    return _simple_transition(REQUEST_CHANGES, submission=submission, actor=actor, reason=reason)


def _simple_transition(action: str, *, submission: Submission, actor, reason: str) -> Submission:
    with transaction.atomic():
        fresh = _prepare(action=action, submission=submission, actor=actor, reason=reason)
        submission_transition(
            submission=fresh,
            to=ACTIONS[action].to_state,
            actor=actor,
            reason=reason.strip(),
            data={"review_action": action},
        )
        _sync(submission, fresh)
        notification_send(submission=fresh, action=action, actor=actor, reason=reason)
    return submission


def review_rerun(*, submission: Submission, actor, reason: str):  # -> runner BenchmarkRun
    """Queue the submission for a new run (from in review or failed) through dispatch.

    Dispatch owns the run row and the queued transition; the reviewer's decision and reason
    are recorded beside it as a `review_rerun` AuditEvent.
    """

    with transaction.atomic():
        fresh = _prepare(action=RERUN, submission=submission, actor=actor, reason=reason)
        audit_record(
            actor=actor,
            obj=fresh,
            action="review_rerun",
            from_state=fresh.status,
            to_state=c.QUEUED,
            reason=reason.strip(),
        )
        run = _dispatch_queued(fresh, what="re-run")
        _sync(submission, fresh)
        notification_send(submission=fresh, action=RERUN, actor=actor, reason=reason)
    return run


def _dispatch_queued(fresh: Submission, *, what: str):  # -> BenchmarkRun
    """Dispatch `fresh` and insist it is queued: when dispatch declines (or fails the
    submission) the reviewer's decision did not happen, and the transaction rolls back."""
    from runs.dispatch import DispatchError, submission_dispatch

    try:
        run = submission_dispatch(submission=fresh)
    except DispatchError as exc:
        raise ReviewError(f"cannot {what}: {exc}") from exc
    fresh.refresh_from_db(fields=["status", "status_reason", "status_changed_at"])
    if run is None or fresh.status != c.QUEUED:
        raise ReviewError(
            f"cannot {what} submission #{fresh.pk}: dispatch left it {fresh.status}"
            + (f" ({fresh.status_reason})" if fresh.status_reason else "")
        )
    return run


def review_approve_launch(*, submission: Submission, actor, reason: str):  # -> BenchmarkRun
    """Approve the exact process launch of a submission waiting on a platform pool, and
    dispatch it. The approval (pool, organization, launch digest, the launch itself, who and
    why) is stored and audited; re-runs of the same launch reuse it (docs/security.md)."""
    from runs.dispatch import launch_digest, launch_identity
    from submissions.models import LaunchApproval

    with transaction.atomic():
        fresh = _prepare(action=APPROVE_LAUNCH, submission=submission, actor=actor, reason=reason)
        identity = launch_identity(fresh)
        if identity is None:
            raise ReviewError(f"submission #{fresh.pk} launches no process")
        digest = launch_digest(identity)
        approval, created = LaunchApproval.objects.get_or_create(
            pool=identity["pool"],
            org_id=fresh.org_id,
            launch_sha256=digest,
            revoked_at__isnull=True,
            defaults={
                "launch": identity,
                "approved_by": actor,
                "reason": reason.strip(),
                "submission": fresh,
            },
        )
        audit_record(
            actor=actor,
            obj=fresh,
            action="launch_approved",
            from_state=fresh.status,
            to_state=c.QUEUED,
            reason=reason.strip(),
            data={"launch_sha256": digest, "approval_id": approval.pk, "new": created},
        )
        run = _dispatch_queued(fresh, what="run the launch of")
        _sync(submission, fresh)
        notification_send(submission=fresh, action=APPROVE_LAUNCH, actor=actor, reason=reason)
    return run


def review_supersede(*, submission: Submission, actor, reason: str):  # -> Result
    """Mark the published result as superseded (kept, shown as no longer current).

    `result_set_status` retires the Result and moves the submission in one transaction."""
    return _result_status(SUPERSEDE, submission=submission, actor=actor, reason=reason)


def review_invalidate(*, submission: Submission, actor, reason: str):  # -> Result
    """Withdraw a published result from the rankings; the record and reason are kept."""
    return _result_status(INVALIDATE, submission=submission, actor=actor, reason=reason)


def _result_status(action: str, *, submission: Submission, actor, reason: str):
    from leaderboard.models import Result
    from leaderboard.publishing import result_set_status

    with transaction.atomic():
        fresh = _prepare(action=action, submission=submission, actor=actor, reason=reason)
        result = Result.objects.select_for_update().filter(submission=fresh).first()
        if result is None:
            raise ReviewError(f"submission #{fresh.pk} has no published result")
        result = result_set_status(
            result=result, to=ACTIONS[action].to_state, actor=actor, reason=reason.strip()
        )
        fresh.refresh_from_db(fields=["status", "status_reason", "status_changed_at"])
        _sync(submission, fresh)
        notification_send(submission=fresh, action=action, actor=actor, reason=reason)
    return result


def review_redact(*, submission: Submission, actor, reason: str, paths: list[str]):  # -> Result
    """Replace the values at `paths` in the published result's public config by
    ``[redacted]``: the result page, the public API and the next export dump serve the
    rewritten config. Audited with the reason and the paths (never the values)."""
    from leaderboard.models import Result
    from leaderboard.redaction import RedactError, result_redact_config

    with transaction.atomic():
        fresh = _prepare(action=REDACT, submission=submission, actor=actor, reason=reason)
        result = Result.objects.filter(submission=fresh).first()
        if result is None:
            raise ReviewError(f"submission #{fresh.pk} has no published result")
        try:
            result = result_redact_config(
                result=result, paths=paths, actor=actor, reason=reason.strip()
            )
        except RedactError as exc:
            raise ReviewError(str(exc)) from exc
        notification_send(submission=fresh, action=REDACT, actor=actor, reason=reason)
    return result


def _sync(target: Submission, source: Submission) -> None:
    """Let the caller's object see the new state."""
    target.status = source.status
    target.status_reason = source.status_reason
    target.status_changed_at = source.status_changed_at


_SERVICES = {
    PUBLISH: review_publish,
    REJECT: review_reject,
    REQUEST_CHANGES: review_request_changes,
    RERUN: review_rerun,
    APPROVE_LAUNCH: review_approve_launch,
    SUPERSEDE: review_supersede,
    INVALIDATE: review_invalidate,
    REDACT: review_redact,
}


def review_act(
    *,
    action: str,
    submission: Submission,
    actor,
    reason: str,
    label: str | None = None,
    paths: list[str] | None = None,
):
    """Run the named review action (the console's single entry point); `label` is the
    public label a publish gives the result (None: the automatic one); `paths` the field
    paths a redact rewrites."""
    from leaderboard.publishing import PublishError

    if action not in _SERVICES:
        raise ReviewError(f"unknown action {action!r}")
    options: dict = {"label": label} if action == PUBLISH and label else {}
    if action == REDACT:
        options = {"paths": list(paths or [])}
    try:
        return _SERVICES[action](submission=submission, actor=actor, reason=reason, **options)
    except (TransitionError, PublishError) as exc:
        raise ReviewError(str(exc)) from exc


# --- Notifications -----------------------------------------------------------------------


def _describe(submission: Submission) -> str:
    return f"#{submission.pk} ({submission.model} on {submission.hardware})"


def notification_send(
    *, submission: Submission, action: str, actor=None, reason: str = ""
) -> Notification:
    """Tell the submission's organization about a review decision: a portal notification
    now, and an e-mail to every active member with an address once the transaction commits
    (so a rolled-back decision sends nothing)."""
    spec = ACTIONS[action]
    subject = f"Submission {_describe(submission)} was {spec.done}"
    lines = [f"Your submission {_describe(submission)} was {spec.done}."]
    if reason.strip():
        lines += ["", "Reviewer's reason:", reason.strip()]
    if action == REQUEST_CHANGES:
        lines += ["", "You can resubmit an amended configuration from the portal or the API."]
    body = "\n".join(lines)
    notification = Notification.objects.create(
        org_id=submission.org_id, submission=submission, action=action, subject=subject, body=body
    )
    recipients = list(
        Membership.objects.filter(org_id=submission.org_id, user__is_active=True)
        .exclude(user__email="")
        .values_list("user__email", flat=True)
        .order_by("user__email")
        .distinct()
    )
    if recipients:
        transaction.on_commit(lambda: _send_emails(subject, body, recipients))
    return notification


def _send_emails(subject: str, body: str, recipients: list[str]) -> None:
    # One message per member, so no member learns the others' addresses.
    messages = [
        EmailMessage(subject, body, settings.DEFAULT_FROM_EMAIL, [address])
        for address in recipients
    ]
    try:
        get_connection().send_messages(messages)
    except Exception:
        # The decision stands and the portal notification exists; a mail outage is logged.
        logger.exception("review notification e-mail failed for %s", ", ".join(recipients))


def notification_mark_read(*, user, notification_ids: list[int] | None = None) -> int:
    """Mark the user's organizations' notifications read (all, or the given ids)."""
    from django.utils import timezone

    qs = Notification.objects.filter(
        org__memberships__user_id=user.pk, read_at__isnull=True
    ).distinct()
    if notification_ids is not None:
        qs = qs.filter(pk__in=notification_ids)
    return Notification.objects.filter(pk__in=list(qs.values_list("pk", flat=True))).update(
        read_at=timezone.now()
    )
