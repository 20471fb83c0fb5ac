"""Public pages. Each answers with its page from the page-rendering service
(`leaderboard.rendering`: the page's data from `leaderboard.pages`, one module per page,
rendered and cached), or exports one of its tables as CSV (`?format=csv`)."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from catalog.models import AIModel, HardwareSystem
from leaderboard import links
from leaderboard.models import Result
from leaderboard.pages.accuracy import accuracy_page
from leaderboard.pages.compare import MAX_COMPARE, compare_page
from leaderboard.pages.methodology import methodology_page
from leaderboard.rendering import (
    Page,
    Visit,
    hardware_detail_page,
    history_page,
    home_page,
    log_scale,
    model_detail_page,
    positive_float,
    positive_int,
    render_page,
    result_detail_page,
    selected_ids,
)
from leaderboard.tables import csv_requested
from submissions.models import Artifact
from submissions.services.artifacts import artifact_url


def _page(request: HttpRequest, page: Page) -> HttpResponse:
    """Render the page (`leaderboard.rendering.render_page`), or export a table of its data
    as CSV."""
    if request.GET.get("format") == "csv":
        data = page.build()
        if data is None:
            raise Http404("not found")
        export = csv_requested(request, data.get("tables") or {}, page.stem)
        if export is not None:
            return export
    html = render_page(Visit.of(request), page, request=request)
    if html is None:
        raise Http404("not found")
    return HttpResponse(links.with_origin(html, request))


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    return _page(request, home_page(request.GET))


@require_GET
def model_list(request: HttpRequest) -> HttpResponse:
    return render(request, "leaderboard/model_list.html", {"models": AIModel.objects.all()})


@require_GET
def model_detail(request: HttpRequest, slug: str) -> HttpResponse:
    return _page(request, model_detail_page(request.GET, slug))


@require_GET
def hardware_list(request: HttpRequest) -> HttpResponse:
    return render(
        request, "leaderboard/hardware_list.html", {"systems": HardwareSystem.objects.all()}
    )


@require_GET
def hardware_detail(request: HttpRequest, slug: str) -> HttpResponse:
    return _page(request, hardware_detail_page(request.GET, slug))


@require_GET
def result_detail(request: HttpRequest, pk: int) -> HttpResponse:
    return _page(request, result_detail_page(request.GET, pk))


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
    ids = selected_ids(request.GET, limit=MAX_COMPARE)
    speed = positive_float(request.GET, "speed")
    n = positive_int(request.GET, "n")
    log = log_scale(request.GET)

    def build() -> dict:
        data = compare_page(ids=ids, speed=speed, concurrency=n, log=log)
        slots = ids + [None] * (MAX_COMPARE - len(ids))
        return dict(data, ids=ids, slots=slots, too_few=len(data["results"]) < 2)

    return _page(request, Page(build=build, template="leaderboard/compare.html", stem="compare"))


@require_GET
def history(request: HttpRequest, model_slug: str, hardware_slug: str) -> HttpResponse:
    return _page(request, history_page(request.GET, model_slug, hardware_slug))


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
