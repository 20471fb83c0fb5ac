"""Public pages. Each parses its query string, fetches its cached page data from
`leaderboard.pages` (one module per page) and renders it, or exports one of its tables as
CSV (`?format=csv`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET

from catalog.models import AIModel, HardwareSystem
from leaderboard import links, receipts
from leaderboard.cache import cached_page
from leaderboard.launch import result_launch
from leaderboard.models import Result
from leaderboard.pages.accuracy import accuracy_page
from leaderboard.pages.compare import MAX_COMPARE, compare_page
from leaderboard.pages.hardware import hardware_page
from leaderboard.pages.history import history_page as history_data
from leaderboard.pages.home import home as home_data
from leaderboard.pages.methodology import methodology_page
from leaderboard.pages.model import model_page
from leaderboard.pages.result import result_page
from leaderboard.tables import csv_requested, prerender
from submissions.models import Artifact
from submissions.services.artifacts import artifact_url

MAX_SELECTED = 200


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


@dataclass(frozen=True)
class Page:
    """A public page: the function that builds its data, its template and the stem of its
    CSV exports' file names."""

    build: Callable[[], dict | None]
    template: str
    stem: str


def page_html(request: HttpRequest, page: Page, *, refresh: bool = False) -> str | None:
    """The page's HTML for an anonymous visitor, through the page cache keyed by the request's
    path and query: the finished HTML (one lookup, no query) until the next publish, and the
    previous HTML while the background rebuild after a publish runs
    (`leaderboard.cache.cached_page`). `refresh` builds and stores it, never serving stale:
    the rebuild's call (`leaderboard.rebuild`). None: the page does not exist."""

    def render_html() -> str | None:
        data = prerender(page.build())
        if data is None:
            return None
        # absolute links (Open Graph, embeds) as a marker the response fills with its own
        # reader's origin: one reader's Host never decides another's (links.with_origin)
        with links.origin_deferred():
            return render_to_string(page.template, _context(request, data), request)

    if request.user.is_authenticated:  # a fresh render, so nothing personal is ever cached
        html = render_html()
    else:
        html = cached_page(f"page:{request.get_full_path()}", render_html, refresh=refresh)
    return links.with_origin(html, request) if html is not None else None


def _page(request: HttpRequest, page: Page) -> HttpResponse:
    """Render the page (`page_html`), or export a table of its data as CSV."""
    if request.GET.get("format") == "csv":
        data = page.build()
        if data is None:
            raise Http404("not found")
        export = csv_requested(request, data.get("tables") or {}, page.stem)
        if export is not None:
            return export
    html = page_html(request, page)
    if html is None:
        raise Http404("not found")
    return HttpResponse(html)


def home_page(request: HttpRequest) -> Page:
    sim = want_simulated(request)
    tier = request.GET.get("tier") or None
    return Page(
        build=lambda: home_data(tier=tier, include_simulated=sim),
        template="leaderboard/home.html",
        stem="leaderboard",
    )


def model_detail_page(request: HttpRequest, slug: str) -> Page:
    sim, ids, log = want_simulated(request), selected_ids(request), log_scale(request)
    return Page(
        build=lambda: model_page(slug=slug, include_simulated=sim, selected=ids, log=log),
        template="leaderboard/model_detail.html",
        stem=f"model-{slug}",
    )


def hardware_detail_page(request: HttpRequest, slug: str) -> Page:
    sim, log = want_simulated(request), log_scale(request)
    return Page(
        build=lambda: hardware_page(slug=slug, include_simulated=sim, log=log),
        template="leaderboard/hardware_detail.html",
        stem=f"hardware-{slug}",
    )


def _result_page(pk: int) -> dict | None:
    data = result_page(pk=pk)
    if data is not None:  # the signed receipt's key id and subjects (leaderboard.receipts)
        data["receipt"] = receipts.summary(data["result"])
        data["launch"] = result_launch(data["result"])  # was the image run (leaderboard.launch)
    return data


def result_detail_page(request: HttpRequest, pk: int) -> Page:
    return Page(
        build=lambda: _result_page(pk),
        template="leaderboard/result_detail.html",
        stem=f"result-{pk}",
    )


def history_page(request: HttpRequest, model_slug: str, hardware_slug: str) -> Page:
    sim, log = want_simulated(request), log_scale(request)
    return Page(
        build=lambda: history_data(
            model_slug=model_slug, hardware_slug=hardware_slug, include_simulated=sim, log=log
        ),
        template="leaderboard/history.html",
        stem=f"history-{model_slug}-{hardware_slug}",
    )


# The pages a publish or a status change affects, by URL name: `leaderboard.rebuild` renders
# them with the same builders as the views below.
REBUILT_PAGES: dict[str, Callable[..., Page]] = {
    "home": home_page,
    "model-detail": model_detail_page,
    "hardware-detail": hardware_detail_page,
    "result-detail": result_detail_page,
    "history": history_page,
}


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    return _page(request, home_page(request))


@require_GET
def model_list(request: HttpRequest) -> HttpResponse:
    return render(request, "leaderboard/model_list.html", {"models": AIModel.objects.all()})


@require_GET
def model_detail(request: HttpRequest, slug: str) -> HttpResponse:
    return _page(request, model_detail_page(request, slug))


@require_GET
def hardware_list(request: HttpRequest) -> HttpResponse:
    return render(
        request, "leaderboard/hardware_list.html", {"systems": HardwareSystem.objects.all()}
    )


@require_GET
def hardware_detail(request: HttpRequest, slug: str) -> HttpResponse:
    return _page(request, hardware_detail_page(request, slug))


@require_GET
def result_detail(request: HttpRequest, pk: int) -> HttpResponse:
    return _page(request, result_detail_page(request, pk))


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
    ids = selected_ids(request, limit=MAX_COMPARE)
    speed = positive_float(request, "speed")
    n = positive_int(request, "n")
    log = log_scale(request)

    def build() -> dict:
        data = compare_page(ids=ids, speed=speed, concurrency=n, log=log)
        slots = ids + [None] * (MAX_COMPARE - len(ids))
        return dict(data, ids=ids, slots=slots, too_few=len(data["results"]) < 2)

    return _page(request, Page(build=build, template="leaderboard/compare.html", stem="compare"))


@require_GET
def history(request: HttpRequest, model_slug: str, hardware_slug: str) -> HttpResponse:
    return _page(request, history_page(request, model_slug, hardware_slug))


@require_GET
def methodology(request: HttpRequest) -> HttpResponse:
    return _page(
        request,
        Page(
            build=methodology_page,
            template="leaderboard/methodology.html",
            stem="methodology",
        ),
    )


@require_GET
def twin_accuracy(request: HttpRequest) -> HttpResponse:
    """Every twin profile against its held-out figures (docs/simulator.md "Accuracy")."""
    return _page(
        request,
        Page(build=accuracy_page, template="leaderboard/twin_accuracy.html", stem="twin-accuracy"),
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
