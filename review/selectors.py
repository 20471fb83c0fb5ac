"""Reads for the review console and the vendor's notification list."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, DateTimeField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from submissions import constants as c
from submissions.models import AuditEvent, Submission

# Queue age buckets: how long a submission has been in its current state.
AGE_CHOICES = [
    ("", "any age"),
    ("lt1d", "under a day"),
    ("1to7d", "1–7 days"),
    ("gt7d", "over 7 days"),
    ("gt30d", "over 30 days"),
]
_AGE_BOUNDS: dict[str, tuple[timedelta | None, timedelta | None]] = {
    "lt1d": (None, timedelta(days=1)),
    "1to7d": (timedelta(days=1), timedelta(days=7)),
    "gt7d": (timedelta(days=7), None),
    "gt30d": (timedelta(days=30), None),
}

DEFAULT_QUEUE_STATE = c.IN_REVIEW


def _with_since(qs: QuerySet[Submission]) -> QuerySet[Submission]:
    return qs.annotate(
        since=Coalesce("status_changed_at", "created_at", output_field=DateTimeField())
    )


def review_queue(
    *,
    state: str = "",
    org: str = "",
    hardware: str = "",
    model: str = "",
    age: str = "",
    now: datetime | None = None,
) -> QuerySet[Submission]:
    """Submissions matching the filters (org/hardware/model by slug; "" = any), oldest in
    their state first, each with its latest run's id and status and its verification status."""
    from runs.models import BenchmarkRun

    qs = _queue_base(org=org, hardware=hardware, model=model, age=age, now=now)
    if state:
        qs = qs.filter(status=state)
    latest_run = BenchmarkRun.objects.filter(submission=OuterRef("pk")).latest_first()
    return (
        qs.select_related("org", "model", "hardware")
        .annotate(
            latest_run_id=Subquery(latest_run.values("pk")[:1]),
            latest_run_status=Subquery(latest_run.values("status")[:1]),
            verification_status=Subquery(latest_run.values("verification__status")[:1]),
        )
        .order_by("since", "pk")
    )


def _queue_base(
    *, org: str, hardware: str, model: str, age: str, now: datetime | None
) -> QuerySet[Submission]:
    qs = _with_since(Submission.objects.all())
    if org:
        qs = qs.filter(org__slug=org)
    if hardware:
        qs = qs.filter(hardware__slug=hardware)
    if model:
        qs = qs.filter(model__slug=model)
    if age:
        older_than, younger_than = _AGE_BOUNDS[age]
        now = now or timezone.now()
        if older_than is not None:
            qs = qs.filter(since__lte=now - older_than)
        if younger_than is not None:
            qs = qs.filter(since__gt=now - younger_than)
    return qs


def review_state_counts(
    *, org: str = "", hardware: str = "", model: str = "", age: str = "", now=None
) -> list[dict[str, Any]]:
    """[{"state", "label", "count"}] for every state, under the other filters."""
    qs = _queue_base(org=org, hardware=hardware, model=model, age=age, now=now)
    counts = dict(qs.order_by().values_list("status").annotate(n=Count("pk")))
    return [
        {"state": state, "label": label, "count": counts.get(state, 0)}
        for state, label in c.STATUS_CHOICES
    ]


def submission_timeline(*, submission: Submission) -> list[AuditEvent]:
    """Every AuditEvent about the submission, its runs and its result, oldest first."""
    from leaderboard.models import Result
    from runs.models import BenchmarkRun

    run_ids = [
        str(pk)
        for pk in BenchmarkRun.objects.filter(submission=submission).values_list("pk", flat=True)
    ]
    result_ids = [
        str(pk) for pk in Result.objects.filter(submission=submission).values_list("pk", flat=True)
    ]
    where = Q(object_type="submissions.submission", object_id=str(submission.pk))
    if run_ids:
        where |= Q(object_type="runner.benchmarkrun", object_id__in=run_ids)
    if result_ids:
        where |= Q(object_type="leaderboard.result", object_id__in=result_ids)
    return list(
        AuditEvent.objects.filter(where).select_related("actor").order_by("created_at", "pk")
    )


def published_result_for(*, submission: Submission):
    """The current published Result for the same model × hardware, other than this one's."""
    from leaderboard.models import Result

    return (
        Result.objects.filter(
            model_id=submission.model_id,
            hardware_id=submission.hardware_id,
            status=Result.STATUS_PUBLISHED,
        )
        .exclude(submission_id=submission.pk)
        .select_related("submission")
        .order_by("-published_at", "-pk")
        .first()
    )
