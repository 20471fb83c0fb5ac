"""Public pages. Each parses its query string, fetches its cached page data from
`leaderboard.pages` and renders it, or exports one of its tables as CSV (`?format=csv`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from urllib.parse import urlencode

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET

from catalog.models import AIModel, HardwareSystem
from leaderboard import pages
from leaderboard.cache import cached_page
from leaderboard.models import Result
from leaderboard.tables import csv_requested, prerender
from submissions.models import Artifact
from submissions.services.artifacts import artifact_url

MAX_SELECTED = 200
# set on the anonymous requests `leaderboard.rebuild` makes: build and store, never serve stale
REBUILD_ATTR = "leaderboard_rebuild"


def want_simulated(request: HttpRequest) -> bool:
    return request.GET.get("simulated") in ("1", "true", "yes")


def selected_ids(request: HttpRequest, limit: int = MAX_SELECTED) -> list[int]:
    out: list[int] = []
    for raw in request.GET.getlist("r"):
        for part in raw.split(","):
            if part.strip().isdigit() and int(part) not in out:
                out.append(int(part))
    return out[:limit]


def positive_float(request: HttpRequest, name: str) -> float | None:
    try:
        value = float(request.GET.get(name, ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def positive_int(request: HttpRequest, name: str) -> int | None:
    value = positive_float(request, name)
    return int(value) if value is not None and value == int(value) else None


def log_scale(request: HttpRequest) -> bool:
    return request.GET.get("scale") == "log"


def query_with(request: HttpRequest, **changes) -> str:
    """The current query string with `changes` applied (None removes a key)."""
    params = {k: request.GET.getlist(k) for k in request.GET}
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = [str(value)]
    return "?" + urlencode(params, doseq=True) if params else "?"


def _context(request: HttpRequest, data: dict) -> dict:
    context = dict(data)
    context["simulated"] = want_simulated(request)
    context["query"] = request.GET.urlencode()
    context["q_sim_on"] = query_with(request, simulated=1)
    context["q_sim_off"] = query_with(request, simulated=None)
    context["q_log"] = query_with(request, scale="log")
    context["q_linear"] = query_with(request, scale=None)
    return context


def _page(
    request: HttpRequest, *, build: Callable[[], dict | None], template: str, stem: str
) -> HttpResponse:
    """Render `build()`'s data with `template`, or export a table of it as CSV.

    Anonymous visitors get the finished HTML from the cache (one lookup, no query) until the
    next publish, and the previous HTML while the background rebuild after a publish runs
    (`leaderboard.cache.cached_page`); signed-in users get a fresh render, so nothing personal
    is ever cached. A request marked `REBUILD_ATTR` (`leaderboard.rebuild`) rebuilds the entry.
    """
    if request.GET.get("format") == "csv":
        data = build()
        if data is None:
            raise Http404("not found")
        export = csv_requested(request, data.get("tables") or {}, stem)
        if export is not None:
            return export

    def render_html() -> str | None:
        data = prerender(build())
        if data is None:
            return None
        return render_to_string(template, _context(request, data), request)

    if request.user.is_authenticated:
        html = render_html()
    else:
        html = cached_page(
            f"page:{request.get_full_path()}",
            render_html,
            refresh=getattr(request, REBUILD_ATTR, False),
        )
    if html is None:
        raise Http404("not found")
    return HttpResponse(html)


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    sim = want_simulated(request)
    tier = request.GET.get("tier") or None
    return _page(
        request,
        build=lambda: pages.home(tier=tier, include_simulated=sim),
        template="leaderboard/home.html",
        stem="leaderboard",
    )


@require_GET
def model_list(request: HttpRequest) -> HttpResponse:
    return render(request, "leaderboard/model_list.html", {"models": AIModel.objects.all()})


@require_GET
def model_detail(request: HttpRequest, slug: str) -> HttpResponse:
    sim, ids, log = want_simulated(request), selected_ids(request), log_scale(request)
    return _page(
        request,
        build=lambda: pages.model_page(slug=slug, include_simulated=sim, selected=ids, log=log),
        template="leaderboard/model_detail.html",
        stem=f"model-{slug}",
    )


@require_GET
def hardware_list(request: HttpRequest) -> HttpResponse:
    return render(
        request, "leaderboard/hardware_list.html", {"systems": HardwareSystem.objects.all()}
    )


@require_GET
def hardware_detail(request: HttpRequest, slug: str) -> HttpResponse:
    sim, log = want_simulated(request), log_scale(request)
    return _page(
        request,
        build=lambda: pages.hardware_page(slug=slug, include_simulated=sim, log=log),
        template="leaderboard/hardware_detail.html",
        stem=f"hardware-{slug}",
    )


@require_GET
def result_detail(request: HttpRequest, pk: int) -> HttpResponse:
    return _page(
        request,
        build=lambda: pages.result_page(pk=pk),
        template="leaderboard/result_detail.html",
        stem=f"result-{pk}",
    )


@require_GET
def result_raw_data(request: HttpRequest, pk: int, artifact_pk: int) -> HttpResponse:
    """A fresh signed link to one raw-records artifact of a public result's run."""
    result = get_object_or_404(Result.objects.only("run_id"), pk=pk)
    artifact = get_object_or_404(
        Artifact, pk=artifact_pk, run_id=result.run_id, kind=Artifact.KIND_RAW_RECORDS
    )
    return HttpResponseRedirect(artifact_url(artifact=artifact, expire=300))


@require_GET
def compare(request: HttpRequest) -> HttpResponse:
    ids = selected_ids(request, limit=pages.MAX_COMPARE)
    speed = positive_float(request, "speed")
    n = positive_int(request, "n")
    log = log_scale(request)

    def build() -> dict:
        data = pages.compare_page(ids=ids, speed=speed, concurrency=n, log=log)
        slots = ids + [None] * (pages.MAX_COMPARE - len(ids))
        return dict(data, ids=ids, slots=slots, too_few=len(data["results"]) < 2)

    return _page(request, build=build, template="leaderboard/compare.html", stem="compare")


@require_GET
def history(request: HttpRequest, model_slug: str, hardware_slug: str) -> HttpResponse:
    sim, log = want_simulated(request), log_scale(request)
    return _page(
        request,
        build=lambda: pages.history_page(
            model_slug=model_slug, hardware_slug=hardware_slug, include_simulated=sim, log=log
        ),
        template="leaderboard/history.html",
        stem=f"history-{model_slug}-{hardware_slug}",
    )


@require_GET
def methodology(request: HttpRequest) -> HttpResponse:
    return _page(
        request,
        build=pages.methodology_page,
        template="leaderboard/methodology.html",
        stem="methodology",
    )


@require_GET
def data(request: HttpRequest) -> HttpResponse:
    """The public API and the newest data dump (`manage.py export_public`)."""
    from leaderboard.export import FORMAT_VERSION, latest_manifest

    manifest = latest_manifest()
    return render(
        request, "leaderboard/data.html", {"manifest": manifest, "format_version": FORMAT_VERSION}
    )


@require_GET
def data_file(request: HttpRequest, name: str) -> HttpResponse:
    """A file of the newest dump: a redirect to a short-lived storage link."""
    from django.core.files.storage import storages
    from django.shortcuts import redirect

    from leaderboard.export import latest_manifest

    manifest = latest_manifest() or {}
    names = {"manifest.json": f"{manifest.get('folder')}/manifest.json"} if manifest else {}
    names.update({f["name"]: f["key"] for f in manifest.get("files") or []})
    if name not in names:
        raise Http404("no such file in the latest data dump")
    return redirect(storages["artifacts"].url(names[name], expire=900))
