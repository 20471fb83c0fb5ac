"""Receipts over HTTP (docs/verification.md "Receipt"): the public key list at a stable URL,
a result's receipt file (the page's download link) and the receipt API that
`agentperf verify RESULT_ID` reads."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from leaderboard import receipts
from leaderboard.api import PublicApi
from leaderboard.models import Result


@require_GET
def keys_json(request: HttpRequest) -> JsonResponse:
    """The platform's receipt keys by key id; retired keys stay listed."""
    response = JsonResponse(receipts.keys_document())
    response["Cache-Control"] = "public, max-age=300"
    return response


@require_GET
def result_receipt_file(request: HttpRequest, pk: int) -> HttpResponse:
    """The result's receipt envelopes as a file (`agentperf verify --offline RECEIPT DIR`)."""
    result = get_object_or_404(
        Result.objects.only("pk", "status", "receipt", "receipt_status"), pk=pk
    )
    if not result.receipt:
        return HttpResponse(
            f"result {pk} has no receipt: published while the platform had no signing key",
            status=404,
            content_type="text/plain; charset=utf-8",
        )
    body = json.dumps(receipts.receipt_file(result), indent=2)
    response = HttpResponse(body, content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="agentperf-result-{pk}-receipt.json"'
    response["Cache-Control"] = "no-cache"
    return response


class KeysApi(PublicApi):
    @extend_schema(responses=OpenApiTypes.OBJECT, operation_id="public_receipt_keys")
    def get(self, request: Request) -> Response:
        return Response(receipts.keys_document())


class ResultReceiptApi(PublicApi):
    @extend_schema(responses=OpenApiTypes.OBJECT, operation_id="public_result_receipt")
    def get(self, request: Request, pk: int) -> Response:
        result = (
            Result.objects.select_related("submission", "run", "model", "hardware", "tier_set")
            .filter(pk=pk)
            .first()
        )
        if result is None:
            raise NotFound(f"no result {pk}")
        return Response(receipts.receipt_bundle(result, absolute=request.build_absolute_uri))
