"""Public catalog pages. Result and chart pages build on these."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from leaderboard.catalog_fields import HARDWARE_FIELDS, MODEL_FIELDS, sourced_rows
from leaderboard.models import AIModel, HardwareSystem, Result


def home(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "leaderboard/home.html",
        {
            "models": AIModel.objects.all(),
            "hardware": HardwareSystem.objects.all(),
            "latest": Result.objects.filter(status=Result.STATUS_PUBLISHED).select_related(
                "model", "hardware"
            )[:10],
        },
    )


def model_list(request: HttpRequest) -> HttpResponse:
    return render(request, "leaderboard/model_list.html", {"models": AIModel.objects.all()})


def model_detail(request: HttpRequest, slug: str) -> HttpResponse:
    model = get_object_or_404(AIModel, slug=slug)
    return render(
        request,
        "leaderboard/model_detail.html",
        {"model": model, "rows": sourced_rows(model, MODEL_FIELDS)},
    )


def hardware_list(request: HttpRequest) -> HttpResponse:
    return render(
        request, "leaderboard/hardware_list.html", {"systems": HardwareSystem.objects.all()}
    )


def hardware_detail(request: HttpRequest, slug: str) -> HttpResponse:
    system = get_object_or_404(HardwareSystem, slug=slug)
    return render(
        request,
        "leaderboard/hardware_detail.html",
        {"system": system, "rows": sourced_rows(system, HARDWARE_FIELDS)},
    )
