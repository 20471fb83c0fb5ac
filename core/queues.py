"""Queue names, one place for the web side and the pool hosts (docs/pipeline.md).

Every name starts with `CELERY_QUEUE_PREFIX`, so test sessions and deployments sharing a
broker never read each other's messages.
"""

from __future__ import annotations

from django.conf import settings


def web_queue() -> str:
    """The queue of web-side tasks (ingest, verification, health round trips)."""
    return f"{settings.CELERY_QUEUE_PREFIX}web"


def loadgen_queue(pool: str) -> str:
    """The queue a pool's load-generator hosts consume: `loadgen.<pool>` (docs/engine.md
    "Sharded trials")."""
    return f"{settings.CELERY_QUEUE_PREFIX}loadgen.{pool}"


def pool_queue(pool: str) -> str:
    """The queue a hardware pool's runner workers consume: `pool.<pool>`."""
    return f"{settings.CELERY_QUEUE_PREFIX}pool.{pool}"
