"""Embeddable frontier charts: an iframe view per model and static PNG/SVG images of the
model, hardware and result frontiers (docs/api.md "Embeds").

Every frontier is read through the pages' own selectors (`Result.objects.public()
.for_chart()`, `leaderboard.pages.common.chart_points`, `charts.result_series`, the model's
default tier set), and cached per publish generation (`leaderboard.cache.cached`), without
the pages' stale grace: a publish or an invalidation changes the embed and the images at
once, and the next reader renders them once (docs/api.md "Embeds and images").

The iframe view is the only page of the site that other sites may frame: it is exempt
from X-Frame-Options and sends its own `Content-Security-Policy` with
`frame-ancestors *`; it has no site navigation, only an attribution link to the full page
that opens outside the frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.http import require_GET

from catalog.models import AIModel, HardwareSystem
from catalog.services import default_tier_set_for
from core.error_shape import error_body
from leaderboard import chart_images, charts, links
from leaderboard.cache import cached
from leaderboard.httpcache import cache_public
from leaderboard.models import Result
from leaderboard.pages.common import chart_points, result_url, tier_guides

# The embed's own policy: its scripts and styles from this site only (plotly.js draws with
# inline style attributes and one injected <style>), framed by anyone.
EMBED_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors *"
)


class FieldError(ValueError):
    """A query parameter that names nothing: a 400 naming the field."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


@dataclass
class Frontier:
    title: str
    page_url: str
    series: list[dict]
    tiers: list[tuple[str, float]]
    tier: str | None = None
    results: list[Result] = field(default_factory=list)

    @property
    def marker_speed(self) -> float | None:
        return dict(self.tiers).get(self.tier) if self.tier else None


def _tier(tiers: list[tuple[str, float]], tier: str | None, tier_set_name: str) -> str | None:
    if not tier:
        return None
    names = [name for name, _ in tiers]
    if tier not in names:
        raise FieldError("tier", f"{tier!r} is not a tier of {tier_set_name}: one of {names}")
    return tier


def model_frontier(
    slug: str, *, hardware: str | None = None, tier: str | None = None, simulated: bool = False
) -> Frontier | None:
    """A model's published frontier (on one hardware system if `hardware`), with its tier
    set's guides; None when there is no such model."""
    model = AIModel.objects.filter(slug=slug).first()
    if model is None:
        return None
    system = None
    if hardware:
        system = HardwareSystem.objects.filter(slug=hardware).first()
        if system is None:
            raise FieldError("hardware", f"no hardware system {hardware!r}")
    tier_set = default_tier_set_for(model)
    tiers = tier_guides(tier_set)
    chosen = _tier(tiers, tier, tier_set.name if tier_set else "no tier set")
    qs = Result.objects.public(include_simulated=simulated).for_chart().filter(model=model)
    if system is not None:
        qs = qs.filter(hardware=system)
    results = list(qs)
    points = chart_points(results)
    series = [
        charts.result_series(
            r, points=points[r.pk], name=r.label if system else f"{r.label} ({r.hardware.name})"
        )
        for r in results
    ]
    title = f"{model.name} on {system.name}" if system else model.name
    return Frontier(
        title=title,
        page_url=reverse("model-detail", args=[model.slug]),
        series=series,
        tiers=tiers,
        tier=chosen,
        results=results,
    )


def hardware_frontier(slug: str, *, simulated: bool = False) -> Frontier | None:
    system = HardwareSystem.objects.filter(slug=slug).first()
    if system is None:
        return None
    results = list(
        Result.objects.public(include_simulated=simulated)
        .for_chart()
        .filter(hardware=system)
        .order_by("model__name", "-published_at")
    )
    points = chart_points(results)
    series = [
        charts.result_series(r, points=points[r.pk], name=f"{r.model.name} — {r.label}")
        for r in results
    ]
    return Frontier(
        title=system.name,
        page_url=reverse("hardware-detail", args=[system.slug]),
        series=series,
        tiers=tier_guides(default_tier_set_for()),
        results=results,
    )


def result_frontier(pk: int) -> Frontier | None:
    """One result's frontier, whatever its status (its page shows every status); a
    result no longer published says so in the title."""
    result = Result.objects.select_related("model", "hardware", "tier_set").filter(pk=pk).first()
    if result is None:
        return None
    title = f"{result.display_label} — {result.model.name} on {result.hardware.name}"
    if result.status != Result.STATUS_PUBLISHED:
        title += f" ({result.status.upper()})"
    return Frontier(
        title=title,
        page_url=result_url(result.pk),
        series=[charts.result_series(result)],
        tiers=tier_guides(result.tier_set),
        results=[result],
    )


# --- views ---------------------------------------------------------------------------


QUERY_FIELDS = ("hardware", "tier", "simulated")
SIMULATED_VALUES = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def _simulated(request: HttpRequest) -> bool:
    return SIMULATED_VALUES.get(request.GET.get("simulated") or "0", False)


def _query_key(request: HttpRequest) -> str:
    """The query an embed or image depends on, canonical (its cache key's tail): anything
    else, a repeated field or a `simulated` that is not a yes/no is a 400, so no query
    string forces a render the cache would not share (docs/api.md "Embeds")."""
    for name in request.GET:
        if name not in QUERY_FIELDS:
            raise FieldError(name, f"unknown parameter; use {', '.join(QUERY_FIELDS)}")
        if len(request.GET.getlist(name)) > 1:
            raise FieldError(name, "given more than once")
    simulated = request.GET.get("simulated")
    if simulated is not None and simulated not in SIMULATED_VALUES:
        raise FieldError("simulated", f"must be one of {', '.join(SIMULATED_VALUES)}")
    return "&".join(f"{n}={request.GET[n]}" for n in QUERY_FIELDS if n in request.GET)


def _bad(exc: FieldError) -> JsonResponse:
    # the API's error shape (docs/api.md "Errors"): the field and what is wrong with it
    return JsonResponse(
        error_body("invalid", f"{exc.field}: {exc.message}", {exc.field: [exc.message]}),
        status=400,
    )


# Surrogate keys (leaderboard.purge): purged with the model's, hardware system's or
# result's pages, and with any catalog change. Cache-Control and the ETag are a page's
# (leaderboard.httpcache).
def _model_keys(request: HttpRequest, kwargs: dict) -> list[str]:
    keys = [f"model:{kwargs['slug']}", f"catalog:model:{kwargs['slug']}", "catalog"]
    if hardware := request.GET.get("hardware"):
        keys += [f"hardware:{hardware}", f"pair:{kwargs['slug']}:{hardware}"]
    return keys


def _hardware_keys(request: HttpRequest, kwargs: dict) -> list[str]:
    return [f"hardware:{kwargs['slug']}", f"catalog:hardware:{kwargs['slug']}", "catalog"]


def _result_keys(request: HttpRequest, kwargs: dict) -> list[str]:
    return [f"result:{kwargs['pk']}", "catalog"]


@cache_public("page", _model_keys)
@require_GET
@xframe_options_exempt
def model_embed(request: HttpRequest, slug: str) -> HttpResponse:
    """The frontier of a model, alone in a page made to be framed by other sites."""
    hardware = request.GET.get("hardware") or None
    tier = request.GET.get("tier") or None
    sim = _simulated(request)

    def build() -> str | None:
        frontier = model_frontier(slug, hardware=hardware, tier=tier, simulated=sim)
        if frontier is None:
            return None
        figure = charts.frontier_figure(
            frontier.series, tiers=frontier.tiers, marker_speed=frontier.marker_speed
        )
        query = request.GET.copy()
        image_url = reverse("embed-model-image", args=[slug, "png"])
        return render_to_string(
            "leaderboard/embed.html",
            {
                "frontier": frontier,
                "figure": {
                    "json": charts.figure_json(figure),
                    "traces": len(frontier.series),
                    "simulated": any(s["is_simulated"] for s in frontier.series),
                },
                "full_url": links.absolute(request, frontier.page_url),
                "image_url": links.absolute(
                    request, image_url + (f"?{query.urlencode()}" if query else "")
                ),
            },
        )

    try:
        key = f"embed:{links.cache_scope(request)}{request.path}?{_query_key(request)}"
        html = cached(key, build)
    except FieldError as exc:
        return _bad(exc)
    if html is None:
        raise Http404("no such model")
    response = HttpResponse(html)
    response["Content-Security-Policy"] = EMBED_CSP
    return response


def _image(request: HttpRequest, fmt: str, load) -> HttpResponse:
    if fmt not in chart_images.FORMATS:
        raise Http404("no such image format")

    def build() -> bytes | None:
        frontier = load()
        if frontier is None:
            return None
        return chart_images.render(
            fmt,
            title=frontier.title,
            series=frontier.series,
            tiers=frontier.tiers,
            chosen_tier=frontier.tier,
            footer=f"AgentPerf Leaderboard · {links.absolute(request, frontier.page_url)}",
        )

    try:
        key = f"image:{links.cache_scope(request)}{request.path}?{_query_key(request)}"
        body = cached(key, build)
    except FieldError as exc:
        return _bad(exc)
    if body is None:
        raise Http404("not found")
    response = HttpResponse(body, content_type=chart_images.FORMATS[fmt])
    return response


@cache_public("page", _model_keys)
@require_GET
def model_image(request: HttpRequest, slug: str, fmt: str) -> HttpResponse:
    return _image(
        request,
        fmt,
        lambda: model_frontier(
            slug,
            hardware=request.GET.get("hardware") or None,
            tier=request.GET.get("tier") or None,
            simulated=_simulated(request),
        ),
    )


@cache_public("page", _hardware_keys)
@require_GET
def hardware_image(request: HttpRequest, slug: str, fmt: str) -> HttpResponse:
    return _image(request, fmt, lambda: hardware_frontier(slug, simulated=_simulated(request)))


@cache_public("page", _result_keys)
@require_GET
def result_image(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    return _image(request, fmt, lambda: result_frontier(pk))
