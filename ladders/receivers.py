"""What the ladders app does when a submission changes state (`submissions.signals`;
connected in `LaddersConfig.ready`): a rung's submission reaching review, publication or a
final failure queues `ladders.refresh` for its running ladders on commit."""

from __future__ import annotations

import functools
import logging
from typing import Any

from django.db import transaction

from ladders.models import Ladder, LadderRung
from ladders.tasks import refresh_ladders
from submissions import constants as c

log = logging.getLogger(__name__)

# the states in which a rung can move its ladder on (ladders.services.ladder_refresh)
MOVES_A_LADDER = frozenset({c.IN_REVIEW, c.PUBLISHED, c.FAILED, c.REJECTED, c.WITHDRAWN, c.INVALID})


def on_submission_transitioned(*, submission: Any, to_state: str, **_: Any) -> None:
    if to_state not in MOVES_A_LADDER:
        return
    if not LadderRung.objects.filter(
        submission_id=submission.pk,
        ladder__status=Ladder.STATUS_RUNNING,
        ladder__source=Ladder.SOURCE_PLATFORM,
    ).exists():
        return
    transaction.on_commit(functools.partial(_queue_refresh, submission.pk))


def _queue_refresh(submission_id: int) -> None:
    try:
        refresh_ladders.apply_async(args=[submission_id], retry=False)
    except Exception:  # the broker is down: the periodic sweep moves the ladder on
        log.exception("could not queue the ladder refresh for submission %s", submission_id)
