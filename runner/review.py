"""Minimal review decisions on a finished run (the full console lives in submissions.review).

Approve → `leaderboard.publishing.result_publish` (a Result; the submission is published);
reject → the lifecycle service with the reason, which the vendor reads as the submission's
`status_reason` through the vendor API.
"""

from __future__ import annotations

from django.db import transaction

from runner.models import BenchmarkRun
from submissions import constants as c
from submissions.services.lifecycle import TransitionError, submission_transition


class ReviewRefused(Exception):
    """The decision does not fit the run or submission (the message says why)."""


def _check(run: BenchmarkRun) -> None:
    if run.status != BenchmarkRun.STATUS_DONE:
        raise ReviewRefused(f"run #{run.pk} is {run.status}; only finished runs are reviewed")
    if run.submission.status != c.IN_REVIEW:
        raise ReviewRefused(
            f"submission #{run.submission_id} is {run.submission.status}, not in review"
        )
    latest = run.submission.runs.order_by("-created_at", "-pk").first()
    if latest is not None and latest.pk != run.pk:
        raise ReviewRefused(f"run #{run.pk} is not the submission's latest run (#{latest.pk})")


def run_approve(*, run: BenchmarkRun, actor, label: str | None = None, reason: str = ""):
    """Publish `run` as a Result."""
    from leaderboard.publishing import PublishError, result_publish

    _check(run)
    try:
        return result_publish(
            submission=run.submission,
            run=run,
            actor=actor,
            label=label or None,
            reason=reason or "approved in review",
        )
    except PublishError as exc:
        raise ReviewRefused(str(exc)) from exc


def run_reject(*, run: BenchmarkRun, actor, reason: str):
    """Reject the submission of `run` for good, with the reason the vendor will read."""
    if not reason.strip():
        raise ReviewRefused("a rejection needs a reason")
    _check(run)
    with transaction.atomic():
        try:
            return submission_transition(
                submission=run.submission,
                to=c.REJECTED,
                actor=actor,
                reason=reason.strip(),
                expected_from=c.IN_REVIEW,
                data={"run_id": run.pk, "review_action": "reject"},
            )
        except TransitionError as exc:
            raise ReviewRefused(str(exc)) from exc
