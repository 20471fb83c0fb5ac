"""Small project-wide views."""

from __future__ import annotations

from django.core import signing
from django.core.files.storage import storages
from django.http import FileResponse, Http404, HttpRequest

from config.storage import unsign_file_token


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
