"""Celery tasks of the ladders app (docs/ladders.md "Platform ladders"). A ladder moves on
(failed, or in review with its attribution computed) when one of its rungs' submissions
changes state, in this task on the web queue; a page or API read only reads.

`ladders.receivers` queues `refresh_ladders` on commit of a rung submission's transition;
`celery beat` sends it with no submission every LADDER_REFRESH_INTERVAL_S as a sweep, so a
transition whose task was lost (the broker down at that moment) still moves its ladder on.
"""

from __future__ import annotations

import logging

from celery import shared_task

from ladders.models import Ladder
from ladders.services import ladder_refresh

log = logging.getLogger(__name__)


@shared_task(name="ladders.refresh", acks_late=True, ignore_result=True, max_retries=0)
def refresh_ladders(submission_id: int | None = None) -> list[int]:
    """Move on every running platform ladder with a rung of ``submission_id`` (every running
    platform ladder when None). Idempotent: a ladder already moved on is left as it is.
    Returns the ids of the ladders whose status changed."""
    running = Ladder.objects.filter(status=Ladder.STATUS_RUNNING, source=Ladder.SOURCE_PLATFORM)
    if submission_id is not None:
        running = running.filter(rungs__submission_id=submission_id).distinct()
    moved = []
    for ladder in running:
        if ladder_refresh(ladder).status != Ladder.STATUS_RUNNING:
            moved.append(ladder.pk)
    return moved
