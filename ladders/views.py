"""Ladder pages and APIs (docs/ladders.md): the vendor API (submit, follow), the public page
with its waterfall, the public API and CSV, and the one review of the whole ladder."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response

from agentperf.fielderrors import NON_FIELD
from agentperf.ladder.attribute import with_readings
from core.api_errors import ApiError
from core.openapi import ErrorSerializer
from core.parsers import JSONParser
from ladders.models import Ladder, LadderRung
from ladders.openapi import BODY_REF, LadderDetailOut, LadderListOut, LadderOut
from ladders.services import (
    LadderReviewError,
    ladder_at_speeds,
    ladder_create,
    ladder_review,
)
from leaderboard.api import PublicApi
from portal.api.access import VendorSubmitThrottle
from portal.api.views import VendorView, config_api_error
from review.views import staff_required
from submissions.schema import ConfigError

MAX_PICKED_SPEEDS = 4
# The OpenAPI description of these endpoints: ladders/openapi.py (docs/api.md "Ladders").
SPEED_PARAMETER = OpenApiParameter(
    "speed",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    many=True,
    description="reader's speeds in tok/s per agent (0 < speed < 100000), repeated or "
    f"comma-separated, at most {MAX_PICKED_SPEEDS}; interpolated on each rung's frontier",
)
BODY_ERROR = OpenApiResponse(
    ErrorSerializer,
    description="invalid ladder: `error.fields` names the rung and field path, e.g. "
    "`rungs.1.patch.speculative.draft_tokens` or `baseline.config.<path>`",
)


def _speeds_param(raw: list[str]) -> list[float]:
    """The reader's speeds (?speed=82&speed=150); ValueError naming the parameter."""
    out: list[float] = []
    for text in raw[:MAX_PICKED_SPEEDS]:
        for part in text.split(","):
            if not part.strip():
                continue
            try:
                value = float(part)
            except ValueError:
                raise ValueError(f"speed: {part!r} is not a number") from None
            if not math.isfinite(value) or not 0 < value < 100_000:
                raise ValueError("speed: in tok/s per agent, 0 < speed < 100000")
            out.append(value)
    return out[:MAX_PICKED_SPEEDS]


def _rungs_summary(ladder: Ladder) -> list[dict[str, Any]]:
    return [
        {
            "order": r.order,
            "index": r.index,
            "name": r.name,
            "description": r.description,
            "submission": r.submission_id,
            "submission_status": r.submission.status,
            "reused": r.reused,
            "config_sha256": r.config_sha256,
        }
        for r in ladder.rungs.select_related("submission").order_by("order", "index")
    ]


def ladder_json(ladder: Ladder, *, doc: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": ladder.pk,
        "name": ladder.name,
        "description": ladder.description,
        "status": ladder.status,
        "status_reason": ladder.status_reason,
        "source": ladder.source,
        "simulated": ladder.is_simulated,
        "model": ladder.model.slug,
        "hardware": ladder.hardware.slug,
        "orders": ladder.orders,
        "url": f"/ladders/{ladder.pk}/",
        "published_at": ladder.published_at.isoformat() if ladder.published_at else None,
        # every figure at a speed says how it was read (agentperf.ladder.attribute.reading)
        "attribution": with_readings(doc if doc is not None else ladder.attribution or {}) or None,
    }


# --------------------------------------------------------------------------- vendor API


class LadderListCreateView(VendorView):
    """POST a ladder {name, baseline: {config | result}, rungs: [{name, description,
    patch}], orders?, speeds?}; GET your ladders."""

    parser_classes = [JSONParser]  # the body is JSON (docs/ladders.md)

    def get_throttles(self):  # type: ignore[no-untyped-def]
        if self.request.method == "POST":
            return [VendorSubmitThrottle()]
        return super().get_throttles()

    @extend_schema(operation_id="ladders_list", responses={200: LadderListOut})
    def get(self, request: Request) -> Response:
        # read only: a ladder moves on in ladders.refresh (ladders/tasks.py), not on a read
        ladders = Ladder.objects.filter(org=self.org).select_related("model", "hardware")[:100]
        return Response(
            {"results": [{**ladder_json(lad, doc={}), "attribution": None} for lad in ladders]}
        )

    @extend_schema(
        operation_id="ladders_create",
        request={"application/json": BODY_REF},
        responses={201: LadderDetailOut, 400: BODY_ERROR},
        description="Submit a ladder: a baseline and ordered changes, each rung a "
        "submission (docs/ladders.md; the body's JSON Schema: /api/v1/schema/ladder.json).",
    )
    def post(self, request: Request) -> Response:
        try:
            body = request.data
        except exceptions.ParseError as exc:
            raise ApiError(
                "invalid", f"body: {exc}", status_code=400, fields={NON_FIELD: [str(exc)]}
            ) from None
        try:
            ladder = ladder_create(org=self.org, body=body, created_by=request.user)
        except ConfigError as exc:
            raise config_api_error(exc) from None
        data = ladder_json(ladder)
        data["rungs"] = _rungs_summary(ladder)
        return Response(data, status=201)


class LadderSchemaView(PublicApi):
    @extend_schema(operation_id="ladder_schema", responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        from ladders.schema import ladder_json_schema

        return Response(ladder_json_schema())


class LadderDetailView(VendorView):
    @extend_schema(operation_id="ladders_retrieve", responses={200: LadderDetailOut})
    def get(self, request: Request, pk: int) -> Response:
        ladder = Ladder.objects.filter(org=self.org, pk=pk).first()
        if ladder is None:
            raise exceptions.NotFound("No such object in your organization.")
        data = ladder_json(ladder)
        data["rungs"] = _rungs_summary(ladder)
        return Response(data)


# --------------------------------------------------------------------------- public


def _published(pk: int) -> Ladder:
    ladder = (
        Ladder.objects.filter(pk=pk, status=Ladder.STATUS_PUBLISHED)
        .select_related("model", "hardware", "org")
        .first()
    )
    if ladder is None:
        raise Http404("no published ladder with this id")
    return ladder


class PublicLadderListApi(PublicApi):
    @extend_schema(operation_id="public_ladders_list", responses={200: LadderListOut})
    def get(self, request: Request) -> Response:
        qs = Ladder.objects.filter(status=Ladder.STATUS_PUBLISHED).select_related(
            "model", "hardware"
        )
        return Response(
            {"results": [{**ladder_json(x, doc={}), "attribution": None} for x in qs[:200]]}
        )


class PublicLadderApi(PublicApi):
    @extend_schema(
        operation_id="public_ladders_retrieve",
        parameters=[SPEED_PARAMETER],
        responses={200: LadderOut},
    )
    def get(self, request: Request, pk: int) -> Response:
        try:
            speeds = _speeds_param(request.query_params.getlist("speed"))
        except ValueError as exc:
            raise ApiError(
                "invalid", str(exc), status_code=400, fields={"speed": [str(exc)]}
            ) from None
        ladder = _published(pk)
        doc = ladder_at_speeds(ladder, speeds) if speeds else ladder.attribution
        return Response(ladder_json(ladder, doc=doc))


def _figure_json(fig: dict[str, Any]) -> str:
    return json.dumps(fig).replace("<", "\\u003c")


@require_GET
def ladder_detail(request: HttpRequest, pk: int) -> HttpResponse:
    from agentperf.ladder.report import (
        ORDER_TITLES,
        frontiers_figure,
        ladder_table_html,
        waterfall_figure,
    )

    try:
        picked = _speeds_param(request.GET.getlist("speed"))
    except ValueError as exc:
        return HttpResponseBadRequest(str(exc))
    ladder = _published(pk)
    doc = with_readings((ladder_at_speeds(ladder, picked) if picked else ladder.attribution) or {})
    speeds = [f"{s['speed']:g}" for s in doc.get("speeds") or []]
    chosen = request.GET.get("at") or (f"{picked[0]:g}" if picked else None)
    if chosen not in speeds and chosen != "single":
        chosen = speeds[0] if speeds else "single"
    tiers = [t["name"] for t in doc.get("tiers") or []]
    # One order at a time, picked by `order` (issue 35: orders sit behind a selector, not
    # side by side); an unknown order shows the first.
    available = list(doc.get("orders") or {})
    order = request.GET.get("order")
    if order not in available:
        order = available[0] if available else None
    orders = []
    if order is not None:
        od = doc["orders"][order]
        orders.append(
            {
                "order": order,
                "title": ORDER_TITLES.get(order, order),
                "waterfall": _figure_json(waterfall_figure(od, chosen)),
                "frontiers": _figure_json(frontiers_figure(od, [float(s) for s in speeds])),
                "table": ladder_table_html(od, speeds, tiers),
            }
        )
    return render(
        request,
        "ladders/detail.html",
        {
            "ladder": ladder,
            "doc": doc,
            "orders": orders,
            "order_choices": [(o, ORDER_TITLES.get(o, o)) for o in available],
            "order": order,
            "speeds": speeds,
            "chosen": chosen,
            "picked": ",".join(f"{s:g}" for s in picked),
        },
    )


@require_GET
def ladder_list(request: HttpRequest) -> HttpResponse:
    qs = Ladder.objects.filter(status=Ladder.STATUS_PUBLISHED).select_related("model", "hardware")
    return render(request, "ladders/list.html", {"ladders": qs[:200]})


CSV_HEAD = [
    "order",
    "rung",
    "name",
    "change",
    "single_agent_speed",
    "single_agent_low",
    "single_agent_high",
    "speed",
    "floor",
    "throughput_per_accelerator",
    "throughput_low",
    "throughput_high",
    "gain",
    "gain_low",
    "gain_high",
    "share",
    "share_low",
    "share_high",
    "within_noise",
    "spec_acceptance",
    "prefix_cache_hit_rate",
    "result",
    "gain_bound",
]


def _bound_cell(bound: dict[str, Any] | None) -> str:
    """A gain taken against a floor (agentperf.ladder.attribute.floors_as_bounds)."""
    if not bound:
        return ""
    if bound.get("value") is None:
        return bound["kind"]
    return f"{bound['kind']} {bound['value']:.1f}"


@require_GET
def ladder_csv(request: HttpRequest, pk: int) -> HttpResponse:
    """One row per order × rung × speed."""
    try:
        picked = _speeds_param(request.GET.getlist("speed"))
    except ValueError as exc:
        return HttpResponseBadRequest(str(exc))
    ladder = _published(pk)
    doc = with_readings((ladder_at_speeds(ladder, picked) if picked else ladder.attribution) or {})
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CSV_HEAD)
    for order, od in (doc.get("orders") or {}).items():
        for r in od["rungs"]:
            sa = r["single_agent_speed"]
            sm = r["server_metrics"]
            for speed, row in r["speeds"].items():
                thr, g, sh = (
                    row["throughput_per_accelerator"],
                    row.get("gain") or {},
                    row.get("share") or {},
                )
                w.writerow(
                    [
                        order,
                        r["index"],
                        r["name"],
                        r.get("change") or "",
                        sa.get("estimate"),
                        sa.get("low"),
                        sa.get("high"),
                        speed,
                        row.get("floor"),
                        thr.get("estimate"),
                        thr.get("low"),
                        thr.get("high"),
                        g.get("estimate"),
                        g.get("low"),
                        g.get("high"),
                        sh.get("estimate"),
                        sh.get("low"),
                        sh.get("high"),
                        row.get("within_noise"),
                        sm.get("spec_acceptance"),
                        sm.get("prefix_cache_hit_rate"),
                        r.get("result") or "",
                        _bound_cell(g.get("bound")),
                    ]
                )
    response = HttpResponse(buf.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="ladder-{ladder.pk}.csv"'
    return response


# --------------------------------------------------------------------------- review


@require_http_methods(["GET", "POST"])
@staff_required
def ladder_review_page(request: HttpRequest, pk: int) -> HttpResponse:
    """Every rung's verification checks on one page, and one decision for the ladder."""
    from runs.models import BenchmarkRun, VerificationReport

    ladder = get_object_or_404(Ladder.objects.select_related("model", "hardware", "org"), pk=pk)
    if request.method == "POST":
        action = request.POST.get("action", "")
        try:
            ladder = ladder_review(
                ladder=ladder,
                actor=request.user,
                action=action,
                reason=request.POST.get("reason", ""),
            )
        except LadderReviewError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"ladder #{ladder.pk} {ladder.status}")
        return redirect("ladder-review", pk=ladder.pk)
    rungs = []
    seen: set[int] = set()
    for r in LadderRung.objects.filter(ladder=ladder).select_related("submission"):
        if r.submission_id in seen:
            continue
        seen.add(r.submission_id)
        run = BenchmarkRun.objects.latest_for(r.submission)
        report = VerificationReport.objects.filter(run=run).first() if run else None
        rungs.append({"rung": r, "run": run, "report": report})
    return render(request, "ladders/review.html", {"ladder": ladder, "rungs": rungs})
