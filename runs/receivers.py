"""Receivers of the submissions layer's signals (`submissions/signals.py`)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from runs.dispatch import submission_dispatch
from runs.models import BenchmarkRun
from submissions.models import Submission
from submissions.signals import submission_validated, submission_withdrawn


def dispatch_validated(sender: Any, *, submission_id: int, **_: Any) -> None:
    """A validated submission goes to dispatch (queued, or awaiting launch approval)."""
    submission_dispatch(submission=Submission.objects.get(pk=submission_id))


def cancel_pending_runs(sender: Any, *, submission: Submission, label: str, **_: Any) -> None:
    """A withdrawal is final: the submission's pending and running runs end `cancelled` now,
    in the withdrawal's transaction (a conditional UPDATE). A running run's token dies with
    it, so its worker's next call (a heartbeat within its interval) tells it to stop:
    docs/pipeline.md "Cancelling", docs/security.md "Every run ends"."""
    BenchmarkRun.objects.filter(
        submission=submission,
        status__in=(BenchmarkRun.STATUS_PENDING, BenchmarkRun.STATUS_RUNNING),
    ).update(
        status=BenchmarkRun.STATUS_CANCELLED,
        finished_at=timezone.now(),
        error=f"cancelled: withdrawn by {label}",
    )


def connect() -> None:
    submission_validated.connect(dispatch_validated, dispatch_uid="runs-dispatch-validated")
    submission_withdrawn.connect(cancel_pending_runs, dispatch_uid="runs-cancel-withdrawn")
