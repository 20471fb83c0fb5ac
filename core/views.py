"""Small project-wide views."""

from __future__ import annotations

from django.core import signing
from django.core.files.storage import storages
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from core.error_shape import error_body
from core.storage import unsign_file_token


def signed_file(request: HttpRequest, alias: str) -> FileResponse:
    """Serves an embedded-profile file when the signed token is valid and unexpired."""
    if alias not in ("artifacts", "datasets"):
        raise Http404("unknown storage")
    try:
        name = unsign_file_token(request.GET.get("t", ""), alias)
    except signing.BadSignature as exc:
        raise Http404(f"invalid link: {exc}") from None
    storage = storages[alias]
    if not storage.exists(name):
        raise Http404("no such file")
    return FileResponse(storage.open(name, "rb"), as_attachment=True, filename=name.split("/")[-1])


def _api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A path no route matches: under /api/ in the API's error shape, else the HTML page."""
    if _api(request):
        return JsonResponse(error_body("not_found", "No such API path."), status=404)
    return defaults.page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's refusals of a request (SuspiciousOperation): a body past
    DATA_UPLOAD_MAX_MEMORY_SIZE is a 413 naming the limit, anything else a 400."""
    from django.conf import settings
    from django.core.exceptions import RequestDataTooBig

    if isinstance(exception, RequestDataTooBig):
        limit = int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        if _api(request):
            body = error_body(
                "too_large",
                f"the body is larger than {limit} bytes",
                fields={"non_field_errors": [f"larger than {limit} bytes"]},
            )
            return JsonResponse(body, status=413)
        return HttpResponse(f"The body is larger than {limit} bytes.", status=413)
    if _api(request):
        return JsonResponse(error_body("bad_request", "The request is malformed."), status=400)
    return defaults.bad_request(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if _api(request):
        return JsonResponse(error_body("server_error", "Internal error."), status=500)
    return defaults.server_error(request)
