"""Celery tasks of the public site. A task takes ids, loads, calls one service
(docs/pipeline.md "Web-side tasks")."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="leaderboard.rebuild_pages", acks_late=True, ignore_result=True, max_retries=0)
def rebuild_pages(result_ids: list[int]) -> list[str]:
    """Rebuild the cached anonymous pages that show these results (web queue; idempotent)."""
    from leaderboard.rebuild import pages_rebuild

    return pages_rebuild(result_ids=[int(pk) for pk in result_ids])
