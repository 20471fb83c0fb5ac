"""Rebuilding the cached pages a publish or a status change affects, off the request path.

`result_pages_changed` runs when the change commits: it bumps the page cache (a removal with
no stale grace, see `leaderboard.cache`) and queues `leaderboard.rebuild_pages` on the web
queue, whose worker renders each affected anonymous page through its own view, so a visitor
gets a finished page instead of paying the rebuild (~0.1–0.5 s for a model page with
hundreds of results).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, QueryDict
from django.urls import resolve, reverse

from leaderboard.cache import chart_cache_added, chart_cache_invalidate
from leaderboard.models import Result

log = logging.getLogger(__name__)

SIMULATED = "?simulated=1"  # the toggle's URL as the pages link it (`views.query_with`)


def affected_paths(results: Iterable[Result]) -> list[str]:
    """The anonymous pages that show these results, as visitors first reach them: home,
    each result's model, hardware and history pages (with and without simulated results)
    and its own page."""
    home = reverse("home")
    paths = [home, home + SIMULATED]
    for r in results:
        for listing in (
            reverse("model-detail", args=[r.model.slug]),
            reverse("hardware-detail", args=[r.hardware.slug]),
            reverse("history", args=[r.model.slug, r.hardware.slug]),
        ):
            paths += [listing, listing + SIMULATED]
        paths.append(reverse("result-detail", args=[r.pk]))
    return list(dict.fromkeys(paths))


def _anonymous_get(path: str) -> HttpRequest:
    from leaderboard.views import REBUILD_ATTR

    request = HttpRequest()
    request.method = "GET"
    request.path, _, query = path.partition("?")
    request.path_info = request.path
    request.GET = QueryDict(query)
    request.META = {"REQUEST_METHOD": "GET", "QUERY_STRING": query}
    request.user = AnonymousUser()
    setattr(request, REBUILD_ATTR, True)
    return request


def pages_rebuild(*, result_ids: list[int]) -> list[str]:
    """Render and cache the anonymous pages showing these results (ids that no longer exist
    are skipped). Idempotent: a second run stores the same pages again. Returns the paths."""
    results = list(Result.objects.select_related("model", "hardware").filter(pk__in=result_ids))
    paths = affected_paths(results) if results else []
    for path in paths:
        match = resolve(path.partition("?")[0])
        response = match.func(_anonymous_get(path), *match.args, **match.kwargs)
        if response.status_code != 200:  # pragma: no cover - every path above exists
            log.warning("page rebuild: %s answered %s", path, response.status_code)
    return paths


def result_pages_changed(*, result_ids: list[int], removed: bool) -> None:
    """On commit of a publish (`removed=False`) or a status change (`removed=True`): bump the
    page cache, then queue the rebuild. The bump never waits on the broker; a failed send
    only leaves the first visitor to rebuild, as before."""
    if removed:
        chart_cache_invalidate()
    else:
        chart_cache_added()
    from leaderboard.tasks import rebuild_pages

    try:
        rebuild_pages.apply_async(args=[result_ids], retry=False)
    except Exception:  # the broker is down: the change is committed and the cache bumped
        log.exception("could not queue the page rebuild for results %s", result_ids)
