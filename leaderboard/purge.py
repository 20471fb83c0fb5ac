"""Purging the reverse proxy by surrogate key (docs/caching.md "Purge").

Pages and API answers carry their keys in the `xkey` header (`leaderboard.httpcache`);
a change sends `leaderboard.purge_http_cache` with exactly the keys it affects, once its
transaction commits. The task retries until every proxy answers. With no
`VARNISH_PURGE_URL` (the embedded demo) nothing is sent.

| change | keys |
|---|---|
| a result published, superseded or invalidated | index, result:R, model:M, hardware:H, pair:M:H |
| a ladder's status (its publish, an import) | ladders, ladder:L |
| a model, hardware system or SLO tier set saved (rare) | catalog (every page showing catalog data) |
| a data dump exported | dump |
"""

from __future__ import annotations

import functools
import logging
import urllib.error
import urllib.request
from collections.abc import Iterable

from celery import shared_task
from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

PURGE_TIMEOUT_S = 10.0
RETRY_MAX_S = 60


def result_keys(results: Iterable) -> list[str]:
    """The keys of the pages and answers that show these results (with model and hardware
    loaded)."""
    keys = ["index"]
    for r in results:
        m, h = r.model.slug, r.hardware.slug
        keys += [f"result:{r.pk}", f"model:{m}", f"hardware:{h}", f"pair:{m}:{h}"]
    return list(dict.fromkeys(keys))


def purge_send(keys: Iterable[str]) -> None:
    """Queue the purge of `keys` now (call it on commit); nothing without a proxy."""
    keys = sorted(set(keys))
    if not settings.VARNISH_PURGE_URLS or not keys:
        return
    try:
        purge_http_cache.apply_async(args=[keys], retry=False)
    except Exception:  # the broker is down: the proxy keeps the old answer until s-maxage
        log.exception("could not queue the proxy purge of %s", keys)


def purge_results(result_ids: Iterable[int]) -> None:
    """`purge_send` the keys of these results' pages (call it on commit)."""
    if not settings.VARNISH_PURGE_URLS:
        return
    from leaderboard.models import Result

    results = Result.objects.select_related("model", "hardware").filter(pk__in=list(result_ids))
    purge_send(result_keys(results))


def purge_on_commit(keys: Iterable[str]) -> None:
    """`purge_send(keys)` when the current transaction commits (at once outside one)."""
    if settings.VARNISH_PURGE_URLS:
        transaction.on_commit(functools.partial(purge_send, list(keys)))


def purge_now(keys: list[str]) -> list[str]:
    """PURGE every proxy with `xkey-purge: keys`; raises when one does not answer 200."""
    answers = []
    for url in settings.VARNISH_PURGE_URLS:
        request = urllib.request.Request(
            url, method="PURGE", headers={"xkey-purge": " ".join(keys)}
        )
        with urllib.request.urlopen(request, timeout=PURGE_TIMEOUT_S) as response:
            answers.append(f"{url}: {response.status} {response.reason}")
    return answers


@shared_task(
    name="leaderboard.purge_http_cache",
    bind=True,
    acks_late=True,
    ignore_result=True,
    max_retries=None,
)
def purge_http_cache(self, keys: list[str]) -> list[str]:
    """Purge `keys` from every proxy; retried (backing off to a minute) until they answer."""
    try:
        answers = purge_now([str(k) for k in keys])
    except (OSError, urllib.error.HTTPError) as exc:
        countdown = min(RETRY_MAX_S, 2 ** min(self.request.retries, 6))
        log.warning("proxy purge of %s failed (%s); retry in %s s", keys, exc, countdown)
        raise self.retry(exc=exc, countdown=countdown) from exc
    log.info("proxy purged %s: %s", keys, "; ".join(answers))
    return answers


def connect_catalog_signals() -> None:
    """A catalog change bumps the page generation (so the site rebuilds) and purges its
    keys, on commit (connected by leaderboard.apps)."""
    from django.db.models.signals import post_delete, post_save

    from catalog.models import AIModel, HardwarePrice, HardwareSystem, SloTierSet

    def changed(sender, instance, **kwargs) -> None:
        # robust: a cache or broker failure is logged, never fails the catalog change
        transaction.on_commit(functools.partial(_catalog_changed, ["catalog"]), robust=True)

    # a price changes every cost figure, computed when read (leaderboard.cost)
    for model in (AIModel, HardwareSystem, SloTierSet, HardwarePrice):
        # weak=False: `changed` is local, a weak reference would die with this call
        post_save.connect(
            changed, sender=model, weak=False, dispatch_uid=f"httpcache-{model.__name__}"
        )
        post_delete.connect(
            changed, sender=model, weak=False, dispatch_uid=f"httpcache-del-{model.__name__}"
        )


def _catalog_changed(keys: list[str]) -> None:
    from leaderboard.cache import chart_cache_invalidate

    chart_cache_invalidate()
    purge_send(keys)
