"""One error shape for every API response (docs/api.md "Errors"):

{"error": {"code": "...", "message": "...", "fields": {"path.to.field": ["..."]}}}
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.contention import BUSY_MESSAGE, busy_headers, is_contention
from core.error_shape import error_body


def _flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            out.update(_flatten(value, path))
    elif isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            out[prefix or "non_field_errors"] = [str(item) for item in detail]
        else:
            for index, item in enumerate(detail):
                out.update(_flatten(item, f"{prefix}.{index}" if prefix else str(index)))
    else:
        out[prefix or "non_field_errors"] = [str(detail)]
    return out


class ApiError(exceptions.APIException):
    """An error raised by a service or view with an explicit code and field map."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status_code: int = status.HTTP_400_BAD_REQUEST,
        fields: dict[str, list[str]] | None = None,
    ) -> None:
        super().__init__(detail=message, code=code)
        self.status_code = status_code
        self.error_code = code
        self.message = message
        self.fields = fields or {}


def exception_handler(exc: Exception, context: dict) -> Response | None:
    if is_contention(exc):  # retryable: 503 busy, never a 500 (core/contention.py)
        return Response(error_body("busy", BUSY_MESSAGE), status=503, headers=busy_headers())
    if isinstance(exc, ApiError):
        return Response(error_body(exc.error_code, exc.message, exc.fields), status=exc.status_code)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or None)
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        fields = _flatten(exc.detail)
        body = error_body("invalid", "The request has invalid fields.", fields)
    else:
        detail = getattr(exc, "detail", str(exc))
        code = getattr(detail, "code", None) or getattr(exc, "default_code", "error")
        body = error_body(str(code), str(detail))
    response.data = body
    return response
