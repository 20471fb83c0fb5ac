"""`/health`: database, cache, broker and storage (docs/security.md "Health endpoint").

The broker is checked at the broker: a connection, and the declaration of a queue of its
own (`<prefix>health`) that no task is ever sent to and no worker consumes. No task is
published, so the answer does not wait behind a benchmark occupying a worker, and a caller
cannot fill a queue. The report is kept in the shared cache for `HEALTH_CACHE_S` seconds:
callers in that window, on any web process, get it without a single check being run.
"""

from __future__ import annotations

import concurrent.futures
import time
import uuid

from django.conf import settings
from django.core.cache import cache
from django.core.files.base import ContentFile
from django.core.files.storage import storages
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

BROKER_TIMEOUT_S = 5.0
CACHE_KEY = "health:report"
# A queue unused this long is dropped by RabbitMQ (each check declares it again).
HEALTH_QUEUE_EXPIRES_MS = 3600 * 1000
_pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="health")


def health_queue() -> str:
    """The broker check's own queue: declared, never published to, never consumed."""
    return f"{settings.CELERY_QUEUE_PREFIX}health"


def _check_database() -> dict:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {"engine": settings.DATABASE_PROFILE}


def _check_cache() -> dict:
    key, value = f"health:probe:{uuid.uuid4().hex}", uuid.uuid4().hex
    cache.set(key, value, 30)
    try:
        if cache.get(key) != value:
            raise RuntimeError("read back a different value")
    finally:
        cache.delete(key)
    return {"backend": settings.CACHES["default"]["BACKEND"].rsplit(".", 1)[-1]}


def _check_broker() -> dict:
    # The project's Celery app (`config/celery.py`), current once Django is set up.
    from celery import current_app as app

    from core.queues import web_queue

    name = health_queue()
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, interval_start=0.5, timeout=BROKER_TIMEOUT_S)
        channel = conn.channel()
        try:
            arguments = (
                {"x-expires": HEALTH_QUEUE_EXPIRES_MS}
                if conn.transport_cls
                in (
                    "amqp",
                    "pyamqp",
                )
                else None
            )
            declared = channel.queue_declare(
                queue=name, durable=False, auto_delete=False, arguments=arguments
            )
            detail = {
                "transport": settings.BROKER_PROFILE,
                "queue": name,
                "queue_messages": int(declared[1]),
            }
        finally:
            channel.close()
        detail["web_consumers"] = _consumers(conn, web_queue())
    return detail


def _consumers(conn, queue: str) -> int | None:
    """Workers consuming `queue` (busy or not), where the broker says; None if unknown."""
    channel = conn.channel()
    try:
        return int(channel.queue_declare(queue=queue, passive=True)[2])
    except Exception:  # not declared yet (no worker ever started), or the transport can't say
        return None
    finally:
        try:
            channel.close()
        except Exception:  # pragma: no cover - a channel the broker already closed
            pass


def _check_storage() -> dict:
    storage = storages["artifacts"]
    key = f"health/{uuid.uuid4().hex}.txt"
    payload = b"agentperf health probe"
    name = storage.save(key, ContentFile(payload))
    try:
        with storage.open(name, "rb") as handle:
            if handle.read() != payload:
                raise RuntimeError("read back different bytes")
    finally:
        storage.delete(name)
    return {"backend": settings.STORAGE_PROFILE}


CHECKS = {
    "database": _check_database,
    "cache": _check_cache,
    "broker": _check_broker,
    "storage": _check_storage,
}


def run_checks() -> dict:
    """Each check in its own thread with a deadline, so a dead broker cannot hang the page."""
    futures = {name: _pool.submit(_timed, fn) for name, fn in CHECKS.items()}
    report: dict[str, dict] = {}
    for name, future in futures.items():
        try:
            report[name] = future.result(timeout=BROKER_TIMEOUT_S + 2)
        except concurrent.futures.TimeoutError:
            report[name] = {"ok": False, "error": f"no answer within {BROKER_TIMEOUT_S + 2:.0f} s"}
    return {
        "ok": all(part["ok"] for part in report.values()),
        "checks": report,
        "checked_at": time.time(),
    }


def _timed(fn) -> dict:
    started = time.perf_counter()
    try:
        detail = fn()
        detail["ok"] = True
    except Exception as exc:
        detail = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        if fn is _check_database:
            connection.close()  # the check's thread ends here; don't leave its connection
    detail["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return detail


def current_report() -> dict:
    """The report of the last `HEALTH_CACHE_S` seconds from the shared cache, else a fresh one
    (then stored). A cache that cannot be read is itself reported by the fresh checks."""
    try:
        hit = cache.get(CACHE_KEY)
    except Exception:
        hit = None
    if hit is not None:
        return hit
    report = run_checks()
    try:
        cache.set(CACHE_KEY, report, settings.HEALTH_CACHE_S)
    except Exception:  # the cache check in `report` says why
        pass
    return report


def health(request: HttpRequest) -> HttpResponse:
    report = dict(current_report())
    report["age_s"] = round(max(0.0, time.time() - report["checked_at"]), 1)
    status = 200 if report["ok"] else 503
    wants_json = request.GET.get("format") == "json" or "application/json" in request.headers.get(
        "Accept", ""
    )
    if wants_json:
        return JsonResponse(report, status=status)
    return render(request, "health.html", {"report": report}, status=status)
