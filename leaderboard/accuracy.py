"""The twin's accuracy page, stored: one TwinAccuracy row per bundled profile, rebuilt from
the committed hold-out and fit records (agentperf.simulator.accuracy; docs/simulator.md
"Accuracy"). ``manage.py twin_accuracy`` runs it; ``make demo`` calls it.

A status change relabels every simulated result of that profile on every page, so a
rebuild that changes anything drops the cached pages without stale grace and purges the
proxy's copies (the same path as a result leaving the pages)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from agentperf.simulator.accuracy import ProfileAccuracy, accuracy_table
from leaderboard.cache import chart_cache_invalidate
from leaderboard.models import Result, TwinAccuracy
from leaderboard.purge import purge_on_commit
from leaderboard.tasks import result_pages_changed

ACCURACY_KEY = "twin-accuracy"  # the proxy's key of the accuracy page and its API


@dataclass(frozen=True, slots=True)
class RebuildReport:
    """What a rebuild did: how many profiles it stored, how many admitted, whose status
    changed (a new profile's included) and which it removed."""

    profiles: int
    admitted: int
    changed: tuple[str, ...]
    removed: tuple[str, ...]


def twin_accuracy_rebuild(table: list[ProfileAccuracy] | None = None) -> RebuildReport:
    """Store ``table`` (default: every bundled profile from its committed records), keep
    nothing else, and relabel the simulated results whose profile's status moved."""
    table = accuracy_table() if table is None else table
    now = timezone.now()
    with transaction.atomic():
        before = dict(TwinAccuracy.objects.select_for_update().values_list("profile", "status"))
        names = {acc.profile for acc in table}
        removed = tuple(sorted(set(before) - names))
        TwinAccuracy.objects.filter(profile__in=removed).delete()
        for acc in table:
            record = acc.dump()
            TwinAccuracy.objects.update_or_create(
                profile=acc.profile,
                defaults={
                    "status": acc.status,
                    "mape": record["mape"],
                    "record": record,
                    "built_at": now,
                },
            )
        changed = tuple(
            sorted(acc.profile for acc in table if before.get(acc.profile) != acc.status)
        )
        moved = {*changed, *removed}
        ids = list(
            Result.objects.filter(is_simulated=True, twin_profile__in=moved).values_list(
                "pk", flat=True
            )
        )
        purge_on_commit([ACCURACY_KEY])
        transaction.on_commit(lambda: _relabel(ids))
    return RebuildReport(
        profiles=len(table),
        admitted=sum(acc.status == TwinAccuracy.STATUS_ADMITTED for acc in table),
        changed=changed,
        removed=removed,
    )


def _relabel(result_ids: list[int]) -> None:
    """On commit: the results whose label moved leave their cached pages as a removal does
    (no stale grace, proxy purged, pages rebuilt); otherwise only the cache is dropped, so
    the accuracy page and its API show the new figures."""
    if result_ids:
        result_pages_changed(result_ids=result_ids, removed=True)
    else:
        chart_cache_invalidate()
