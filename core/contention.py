"""Database contention answers 503 with Retry-After, never 500 (docs/pipeline.md
"Contention").

A statement that waited DATABASE_LOCK_TIMEOUT_S for a lock another writer held (SQLite's
"database is locked", PostgreSQL's lock_not_available 55P03), or that lost a serialization
(40001) or a deadlock (40P01), changed nothing: its transaction rolled back, and the same
request a moment later may well succeed. The caller is told so: `503 busy` with
`Retry-After: DATABASE_BUSY_RETRY_AFTER_S`, in the API's one error shape under /api/ (core/
api_errors.py) and as text on pages (`ContentionMiddleware`). The pool worker retries such
an answer (runner/worker/api_client.py); every runner API write is idempotent, so a retry
never counts twice.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

from core.error_shape import error_body

# lock_not_available (lock_timeout), serialization_failure, deadlock_detected
CONTENTION_SQLSTATES = frozenset({"55P03", "40001", "40P01"})
SQLITE_BUSY_MESSAGES = ("database is locked", "database table is locked")
BUSY_MESSAGE = "the database is busy with other writes; nothing was changed, retry the request"


def is_contention(exc: BaseException) -> bool:
    """True when ``exc`` is a database error that a retry of the same request may clear."""
    if not isinstance(exc, OperationalError):
        return False
    if getattr(exc.__cause__, "sqlstate", None) in CONTENTION_SQLSTATES:
        return True
    return any(message in str(exc) for message in SQLITE_BUSY_MESSAGES)


def retry_after_s() -> int:
    return int(settings.DATABASE_BUSY_RETRY_AFTER_S)


def busy_headers() -> dict[str, str]:
    """What a 503 busy answer carries: when to come back, and that no cache may keep it."""
    return {"Retry-After": str(retry_after_s()), "Cache-Control": "no-store"}


class ContentionMiddleware:
    """Pages (and any view outside DRF) answer contention with 503 + Retry-After; the API's
    exception handler does the same for DRF views in the error shape."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_contention(exception):
            return None
        if request.path.startswith("/api/"):
            response: HttpResponse = JsonResponse(error_body("busy", BUSY_MESSAGE), status=503)
        else:
            response = HttpResponse(BUSY_MESSAGE, status=503, content_type="text/plain")
        for name, value in busy_headers().items():
            response[name] = value
        return response
