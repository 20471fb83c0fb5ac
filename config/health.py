"""`/health`: database, broker (a real round trip through a worker) and storage."""

from __future__ import annotations

import concurrent.futures
import time
import uuid

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import storages
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

BROKER_TIMEOUT_S = 5.0
_pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="health")


def _check_database() -> dict:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {"engine": settings.DATABASE_PROFILE}


def _broker_round_trip() -> dict:
    from config.celery import web_queue
    from runner.tasks import health_ping

    nonce = uuid.uuid4().hex
    result = health_ping.apply_async(args=[nonce], queue=web_queue(), retry=False)
    reply = result.get(timeout=BROKER_TIMEOUT_S, propagate=True)
    if reply.get("nonce") != nonce:
        raise RuntimeError("worker answered with the wrong nonce")
    return {"transport": settings.BROKER_PROFILE, "worker": reply.get("hostname", "")}


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


CHECKS = {"database": _check_database, "broker": _broker_round_trip, "storage": _check_storage}


def run_checks() -> dict:
    """Each check in its own thread with a deadline, so a dead broker cannot hang the page."""
    futures = {name: _pool.submit(_timed, fn) for name, fn in CHECKS.items()}
    report: dict[str, dict] = {}
    for name, future in futures.items():
        try:
            report[name] = future.result(timeout=BROKER_TIMEOUT_S + 2)
        except concurrent.futures.TimeoutError:
            report[name] = {"ok": False, "error": f"no answer within {BROKER_TIMEOUT_S + 2:.0f} s"}
    return {"ok": all(part["ok"] for part in report.values()), "checks": report}


def _timed(fn) -> dict:
    started = time.perf_counter()
    try:
        detail = fn()
        detail["ok"] = True
    except Exception as exc:
        detail = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    detail["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return detail


def health(request: HttpRequest) -> HttpResponse:
    report = run_checks()
    status = 200 if report["ok"] else 503
    wants_json = request.GET.get("format") == "json" or "application/json" in request.headers.get(
        "Accept", ""
    )
    if wants_json:
        return JsonResponse(report, status=status)
    return render(request, "health.html", {"report": report}, status=status)
