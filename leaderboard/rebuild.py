"""Rebuilding the cached pages a publish or a status change affects, off the request path.

When the change commits, `leaderboard.tasks.result_pages_changed` bumps the page cache (a
removal with no stale grace, see `leaderboard.cache`) and queues `leaderboard.rebuild_pages`
on the web queue, whose worker calls `pages_rebuild`: each affected anonymous page is built
by the page-rendering service (`leaderboard.rendering`: `REBUILT_PAGES`, `render_page`) as
an anonymous visit to its path, with no request, so a visitor gets a finished page instead
of paying the rebuild (~0.1–0.5 s for a model page with hundreds of results).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.urls import resolve, reverse

from leaderboard.models import Result
from leaderboard.rendering import REBUILT_PAGES, Visit, render_page

log = logging.getLogger(__name__)

SIMULATED = "?simulated=1"  # the toggle's URL as the pages link it (`rendering.query_with`)


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


def pages_rebuild(*, result_ids: list[int]) -> list[str]:
    """Render and cache the anonymous pages showing these results (ids that no longer exist
    are skipped). Idempotent: a second run stores the same pages again. Returns the paths."""
    results = list(Result.objects.select_related("model", "hardware").filter(pk__in=result_ids))
    paths = affected_paths(results) if results else []
    for path in paths:
        visit = Visit(path)
        match = resolve(visit.path)
        page = REBUILT_PAGES[match.url_name](visit.query, *match.args, **match.kwargs)
        if render_page(visit, page, refresh=True) is None:  # pragma: no cover - all exist
            log.warning("page rebuild: %s is not found", path)
    return paths
