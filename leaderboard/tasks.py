"""Celery tasks of the public site. A task takes ids, loads, calls one service
(docs/pipeline.md "Web-side tasks"). `result_pages_changed` is the commit hook of a publish
or a status change that queues the page rebuild."""

from __future__ import annotations

import logging

from celery import shared_task

from leaderboard.cache import chart_cache_added, chart_cache_invalidate

# registered with the worker through this module (Celery discovers `tasks` modules)
from leaderboard.purge import purge_http_cache, purge_results
from leaderboard.rebuild import pages_rebuild

__all__ = ["export_public_dump", "purge_http_cache", "rebuild_pages", "result_pages_changed"]

log = logging.getLogger(__name__)


@shared_task(name="leaderboard.rebuild_pages", acks_late=True, ignore_result=True, max_retries=0)
def rebuild_pages(result_ids: list[int]) -> list[str]:
    """Rebuild the cached anonymous pages that show these results (web queue; idempotent),
    then purge them from the reverse proxy: a proxy that refetched during the stale grace
    after a publish (leaderboard.cache) drops that page for the rebuilt one."""
    ids = [int(pk) for pk in result_ids]
    paths = pages_rebuild(result_ids=ids)
    purge_results(ids)
    return paths


@shared_task(name="leaderboard.export_public", acks_late=True, ignore_result=True, max_retries=0)
def export_public_dump() -> str | None:
    """A new public dump after a result left the board (web queue), where one was ever
    exported: the newest dump withholds an invalidated result's config at once, not at the
    next `manage.py export_public` (docs/security.md "Secrets in configs")."""
    from leaderboard.export import export_public, latest_manifest

    if latest_manifest() is None:
        return None
    return str(export_public()["folder"])


def result_pages_changed(*, result_ids: list[int], removed: bool) -> None:
    """On commit of a publish (`removed=False`) or a status change (`removed=True`): bump the
    page cache, then queue the rebuild. The bump never waits on the broker; a failed send
    only leaves the first visitor to rebuild, as before."""
    if removed:
        chart_cache_invalidate()
    else:
        chart_cache_added()
    # the proxy drops these pages now (a removal is never served stale by Django, so the
    # refetch shows it); the rebuild purges them again once the new pages are built
    purge_results(result_ids)

    try:
        rebuild_pages.apply_async(args=[result_ids], retry=False)
    except Exception:  # the broker is down: the change is committed and the cache bumped
        log.exception("could not queue the page rebuild for results %s", result_ids)
    if removed:
        try:
            export_public_dump.apply_async(retry=False)
        except Exception:  # the next export (or status change) writes it
            log.exception("could not queue the public dump after results %s", result_ids)
