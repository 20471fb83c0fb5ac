"""Refuse request paths and query strings that carry control characters
(docs/security.md "Input limits").

A NUL in a URL reaches the database as a lookup value (`?status=%00`, `/models/a%00b/`),
and PostgreSQL refuses NUL in text: a 500. No path segment or query value of ours may hold
a control character, so such a request is a 400 naming the query parameter (or `path`),
in the API's error shape under /api/.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

from core.error_shape import error_body

_CONTROL = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


def _problem(request: HttpRequest) -> tuple[str, str] | None:
    if _CONTROL.search(request.path):
        return "path", "the path contains a control character"
    for name, values in request.GET.lists():
        if _CONTROL.search(name):
            return "query", "a query parameter name contains a control character"
        if any(_CONTROL.search(value) for value in values):
            return name, "contains a control character"
    return None


class RefuseControlCharactersMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        found = _problem(request)
        if found is None:
            return self.get_response(request)
        field, message = found
        if request.path.startswith("/api/"):
            body = error_body("invalid", f"{field}: {message}", {field: [message]})
            return JsonResponse(body, status=400)
        return HttpResponseBadRequest(f"{field}: {message}", content_type="text/plain")
