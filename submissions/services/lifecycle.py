"""The one place a submission changes state."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from submissions import constants as c
from submissions.models import AuditEvent, Submission
from submissions.signals import submission_transitioned


class TransitionError(Exception):
    """A transition that the lifecycle does not allow, or that lost a race."""


def audit_record(
    *,
    actor=None,
    actor_label: str = "",
    obj,
    action: str,
    from_state: str = "",
    to_state: str = "",
    reason: str = "",
    data: dict | None = None,
) -> AuditEvent:
    label = actor_label or (getattr(actor, "get_username", lambda: "")() if actor else "system")
    return AuditEvent.objects.create(
        actor=actor if getattr(actor, "pk", None) else None,
        actor_label=label or "system",
        object_type=obj._meta.label_lower,
        object_id=str(obj.pk),
        action=action,
        from_state=from_state,
        to_state=to_state,
        reason=reason,
        data=data or {},
    )


def submission_transition(
    *,
    submission: Submission,
    to: str,
    actor=None,
    actor_label: str = "",
    reason: str = "",
    expected_from: str | None = None,
    data: dict | None = None,
) -> Submission:
    """Move `submission` to `to` with a conditional UPDATE and an AuditEvent.

    The UPDATE only matches while the row is still in the state we read (or
    `expected_from`), so of two concurrent attempts exactly one wins; the loser gets a
    TransitionError and nothing changes.
    """
    if to not in c.ALL_STATES:
        raise TransitionError(f"unknown state {to!r}")
    current = expected_from or submission.status
    allowed = c.ALLOWED_TRANSITIONS.get(current, ())
    if to not in allowed:
        raise TransitionError(
            f"submission #{submission.pk} cannot go from {current!r} to {to!r}"
            + (f"; allowed: {', '.join(allowed)}" if allowed else "; it is final")
        )
    if (current, to) in c.REASON_REQUIRED and not reason.strip():
        raise TransitionError(f"going from {current!r} to {to!r} needs a reason")
    now = timezone.now()
    with transaction.atomic():
        updated = Submission.objects.filter(pk=submission.pk, status=current).update(
            status=to, status_reason=reason, status_changed_at=now, updated_at=now
        )
        if updated != 1:
            fresh = Submission.objects.filter(pk=submission.pk).values_list("status", flat=True)
            raise TransitionError(
                f"submission #{submission.pk} is no longer {current!r} "
                f"(now {next(iter(fresh), 'deleted')!r}); nothing changed"
            )
        audit_record(
            actor=actor,
            actor_label=actor_label,
            obj=submission,
            action="transition",
            from_state=current,
            to_state=to,
            reason=reason,
            data=data,
        )
        submission_transitioned.send(
            sender=Submission, submission=submission, from_state=current, to_state=to
        )
    submission.status = to
    submission.status_reason = reason
    submission.status_changed_at = now
    return submission
