"""The page-rendering service: one public page for one visit (its path and query), built by
its page function (`leaderboard.pages`), rendered with its template and kept in the page
cache (`leaderboard.cache.cached_page`).

The views answer requests with it, and the background rebuild after a publish
(`leaderboard.rebuild`) renders the same pages with it, with no request at all: an
anonymous page is rendered without one whoever builds it, so the cached HTML is the same
either way. Only a signed-in visitor's page is rendered with their request (fresh, never
cached: nothing personal reaches the cache). Absolute links are written as
`links.ORIGIN_MARKER` and filled per response (`links.with_origin`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import urlencode

from django.http import HttpRequest, QueryDict
from django.template.loader import render_to_string

from leaderboard import links
from leaderboard.cache import cached_page
from leaderboard.pages.hardware import hardware_page
from leaderboard.pages.history import history_page as history_data
from leaderboard.pages.home import home as home_data
from leaderboard.pages.model import model_page
from leaderboard.pages.result import result_page
from leaderboard.tables import prerender

MAX_SELECTED = 200


@dataclass(frozen=True)
class Visit:
    """What a public page depends on: the path and query a visitor asked for, as they sent
    it (the page cache's key)."""

    full_path: str

    @classmethod
    def of(cls, request: HttpRequest) -> Visit:
        return cls(request.get_full_path())

    @property
    def path(self) -> str:
        return self.full_path.partition("?")[0]

    @cached_property
    def query(self) -> QueryDict:
        return QueryDict(self.full_path.partition("?")[2])


@dataclass(frozen=True)
class Page:
    """A public page: the function that builds its data, its template and the stem of its
    CSV exports' file names."""

    build: Callable[[], dict | None]
    template: str
    stem: str


# --- the query a page reads --------------------------------------------------------------


def want_simulated(query: QueryDict) -> bool:
    return query.get("simulated") in ("1", "true", "yes")


def selected_ids(query: QueryDict, limit: int = MAX_SELECTED) -> list[int]:
    out: list[int] = []
    for raw in query.getlist("r"):
        for part in raw.split(","):
            if part.strip().isdigit() and int(part) not in out:
                out.append(int(part))
    return out[:limit]


def positive_float(query: QueryDict, name: str) -> float | None:
    try:
        value = float(query.get(name, ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def positive_int(query: QueryDict, name: str) -> int | None:
    value = positive_float(query, name)
    return int(value) if value is not None and value == int(value) else None


def log_scale(query: QueryDict) -> bool:
    return query.get("scale") == "log"


def query_with(query: QueryDict, **changes: object) -> str:
    """The query string with `changes` applied (None removes a key)."""
    params = {k: query.getlist(k) for k in query}
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = [str(value)]
    return "?" + urlencode(params, doseq=True) if params else "?"


def page_context(visit: Visit, data: dict) -> dict:
    """The template context of a page: its data and the links its controls need."""
    query = visit.query
    context = dict(data)
    context["page_path"] = visit.path
    context["simulated"] = want_simulated(query)
    context["query"] = query.urlencode()
    context["q_sim_on"] = query_with(query, simulated=1)
    context["q_sim_off"] = query_with(query, simulated=None)
    context["q_log"] = query_with(query, scale="log")
    context["q_linear"] = query_with(query, scale=None)
    return context


def render_page(
    visit: Visit, page: Page, *, refresh: bool = False, request: HttpRequest | None = None
) -> str | None:
    """The page's HTML (origin markers not yet filled), or None when it does not exist.

    Anonymous: through the page cache keyed by the visit's path and query, the finished HTML
    until the next publish and the previous one while the background rebuild runs; `refresh`
    builds and stores it, never serving stale (the rebuild's call). `request`, when its user
    is signed in, gets a fresh render with it instead."""

    def render_html(with_request: HttpRequest | None = None) -> str | None:
        data = prerender(page.build())
        if data is None:
            return None
        # absolute links (Open Graph, embeds) as a marker the response fills with its own
        # reader's origin: one reader's Host never decides another's (links.with_origin)
        with links.origin_deferred():
            return render_to_string(page.template, page_context(visit, data), with_request)

    if request is not None and request.user.is_authenticated:
        return render_html(request)
    return cached_page(f"page:{visit.full_path}", render_html, refresh=refresh)


# --- the pages a publish or a status change affects --------------------------------------


def home_page(query: QueryDict) -> Page:
    sim = want_simulated(query)
    tier = query.get("tier") or None
    return Page(
        build=lambda: home_data(tier=tier, include_simulated=sim),
        template="leaderboard/home.html",
        stem="leaderboard",
    )


def model_detail_page(query: QueryDict, slug: str) -> Page:
    sim, ids, log = want_simulated(query), selected_ids(query), log_scale(query)
    return Page(
        build=lambda: model_page(slug=slug, include_simulated=sim, selected=ids, log=log),
        template="leaderboard/model_detail.html",
        stem=f"model-{slug}",
    )


def hardware_detail_page(query: QueryDict, slug: str) -> Page:
    sim, log = want_simulated(query), log_scale(query)
    return Page(
        build=lambda: hardware_page(slug=slug, include_simulated=sim, log=log),
        template="leaderboard/hardware_detail.html",
        stem=f"hardware-{slug}",
    )


def result_detail_page(query: QueryDict, pk: int) -> Page:
    return Page(
        build=lambda: result_page(pk=pk),
        template="leaderboard/result_detail.html",
        stem=f"result-{pk}",
    )


def history_page(query: QueryDict, model_slug: str, hardware_slug: str) -> Page:
    sim, log = want_simulated(query), log_scale(query)
    return Page(
        build=lambda: history_data(
            model_slug=model_slug, hardware_slug=hardware_slug, include_simulated=sim, log=log
        ),
        template="leaderboard/history.html",
        stem=f"history-{model_slug}-{hardware_slug}",
    )


# By URL name: the views answer with these, and `leaderboard.rebuild` renders the same.
REBUILT_PAGES: dict[str, Callable[..., Page]] = {
    "home": home_page,
    "model-detail": model_detail_page,
    "hardware-detail": hardware_detail_page,
    "result-detail": result_detail_page,
    "history": history_page,
}
