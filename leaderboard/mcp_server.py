"""The read-only MCP server of the public data (docs/api.md "MCP").

Built on the official `mcp` Python SDK (`MCPServer`), served over streamable HTTP at
`/mcp` by `manage.py mcp_server`, beside the site: its own process (uvicorn), the site's
database and shared cache. Stateless and answering plain JSON, so any number of these
processes may sit behind one address with no session affinity. Anonymous, and throttled
per client address with the public API's anonymous rate (`THROTTLE_ANON`), counted in the
shared cache across processes under its own keys.

Every tool reads what the public pages read, through the same selectors: the published,
coding-workload results (`Result.objects.public().for_chart()`), the frontier builder of
the embeds (`leaderboard.embed.model_frontier`), the public API's serializers and its
compare (`leaderboard.api`). Answers are cached per publish generation
(`leaderboard.cache.cached`), so a publish or an invalidation shows in the next call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, TypeVar

import anyio.to_thread
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.db import close_old_connections
from django.db.models import Count, Q
from django.urls import NoReverseMatch, reverse
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations
from rest_framework.exceptions import NotFound
from starlette.types import ASGIApp, Receive, Scope, Send

from catalog.models import AIModel, HardwareSystem
from core.throttles import AnonThrottle
from leaderboard import api, embed
from leaderboard.cache import cached
from leaderboard.models import Result
from leaderboard.pages.common import result_url

PATH = "/mcp"
INSTRUCTIONS = (
    "Read-only access to the AgentPerf Leaderboard: published benchmark results of LLM "
    "inference serving on agentic coding work. A result's frontier is its trials' points: "
    "x = p25 output speed per agent (tok/s), y = throughput per accelerator (input incl. "
    "cached + output tok/s per accelerator used). Max agents at a tier = the highest "
    "concurrency at which the tier (a minimum p25 speed, a TTFT limit, an error-rate limit) "
    "passed. Simulated results are left out unless asked for and always marked "
    "is_simulated. Start with list_models and list_hardware."
)
READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False, openWorldHint=False)
T = TypeVar("T")


def _django(fn: Callable[..., T]) -> Callable[..., T]:
    """A tool body runs in a worker thread (the SDK runs sync tools so): drop a database
    connection past its age or broken, before and after, as a Django request would."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return wrapper


def _url(name: str, *args: Any) -> str | None:
    try:
        return reverse(name, args=args)
    except NoReverseMatch:
        return None


_published = Q(results__status=Result.STATUS_PUBLISHED)


# --- tools ---------------------------------------------------------------------------


@_django
def list_models() -> list[dict]:
    """Every served model in the catalog, with its number of published results and the
    paths of its page and public API entry."""

    def build() -> list[dict]:
        models = AIModel.objects.annotate(n=Count("results", filter=_published)).order_by("name")
        return [
            {
                "slug": m.slug,
                "name": m.name,
                "provider": m.provider,
                "published_results": m.n,
                "page": reverse("model-detail", args=[m.slug]),
                "api": reverse("public-api-model", args=[m.slug]),
            }
            for m in models
        ]

    return cached("mcp:models", build)


@_django
def list_hardware() -> list[dict]:
    """Every hardware system in the catalog, with its number of published results."""

    def build() -> list[dict]:
        systems = HardwareSystem.objects.annotate(n=Count("results", filter=_published))
        return [
            {
                "slug": h.slug,
                "name": h.name,
                "vendor": h.vendor,
                "accelerator": h.accelerator,
                "accelerators_per_system": h.accelerators_per_system,
                "published_results": h.n,
                "page": reverse("hardware-detail", args=[h.slug]),
            }
            for h in systems.order_by("name")
        ]

    return cached("mcp:hardware", build)


def _points(compact: list[list], tier_speed: float | None) -> list[dict]:
    out = []
    for n, speed, throughput, ttft, per_accel, _, bounds in compact:
        point = {
            "concurrency": n,
            "p25_speed": speed,
            "throughput_per_accelerator": throughput,
            "ttft_p75_s": ttft,  # null: failed requests (infinite TTFT)
            "agents_per_accelerator": per_accel,
            "p25_speed_95ci": bounds[:2] if bounds[0] is not None else None,
            "throughput_95ci": bounds[2:] if bounds[2] is not None else None,
        }
        if tier_speed is not None:
            point["meets_tier_speed"] = speed >= tier_speed
        out.append(point)
    return out


@_django
def frontier(
    model: str, hardware: str, tier: str | None = None, include_simulated: bool = False
) -> dict:
    """The frontier points of every published result of a model on a hardware system (slugs
    from list_models and list_hardware), ordered by concurrency, as the model page charts
    them. With `tier` (a tier name of the model's tier set): that tier's definition, each
    result's max agents and agents per accelerator at it, and which points meet its speed."""

    def build() -> dict:
        try:
            found = embed.model_frontier(
                model, hardware=hardware, tier=tier, simulated=include_simulated
            )
        except embed.FieldError as exc:
            raise ToolError(f"{exc.field}: {exc.message}") from None
        if found is None:
            raise ToolError(f"model: no model {model!r}")
        speeds = dict(found.tiers)
        by_id = {r.pk: r for r in found.results}
        results = []
        for s in found.series:
            r = by_id[s["id"]]
            row = {
                "id": r.pk,
                "label": r.label,
                "is_simulated": r.is_simulated,
                "published_at": r.published_at.isoformat(),
                "accelerators_used": r.accelerators_used,
                "max_agents": r.max_agents,
                "page": result_url(r.pk),
                "points": _points(s["points"], speeds.get(tier) if tier else None),
            }
            if tier:
                row["max_agents_at_tier"] = r.max_agents.get(tier)
                row["agents_per_accelerator_at_tier"] = r.agents_per_accelerator.get(tier)
            results.append(row)
        return {
            "model": model,
            "hardware": hardware,
            "tiers": [{"name": n, "min_p25_output_speed": v} for n, v in found.tiers],
            "tier": {"name": tier, "min_p25_output_speed": speeds[tier]} if tier else None,
            "results": results,
            "image": reverse("embed-model-image", args=[model, "png"]) + f"?hardware={hardware}",
        }

    return cached(f"mcp:frontier:{model}:{hardware}:{tier}:{include_simulated}", build)


def _result_or_error(result_id: int) -> Result:
    result = (
        Result.objects.select_related(
            "model", "hardware", "tier_set", "submission__org", "run__dataset", "run__verification"
        )
        .filter(pk=result_id)
        .first()
    )
    if result is None:
        raise ToolError(f"result_id: no result {result_id}")
    return result


@_django
def result_provenance(result_id: int) -> dict:
    """Where a result comes from: its status (published, superseded, invalidated, with the
    reason), who submitted it and when, the run, the dataset's digest, the engine, the
    verification verdict, the search flags, and its signed measurement receipt when the
    platform signed one (null otherwise: published without a signing key)."""

    def build() -> dict:
        result = _result_or_error(result_id)
        detail = api.ResultDetailOut(result)
        verification = detail.get_verification(result)
        receipt = None
        if getattr(result, "receipt", None):
            receipt = {
                "envelope": result.receipt,
                "status_envelope": getattr(result, "receipt_status", None) or None,
                "api": _url("public-api-result-receipt", result.pk),
            }
        return {
            "id": result.pk,
            "label": result.label,
            "model": result.model.slug,
            "hardware": result.hardware.slug,
            "status": result.status,
            "status_reason": result.status_reason,
            "is_simulated": result.is_simulated,
            "published_at": result.published_at.isoformat(),
            "engine": detail.get_engine(result),
            "provenance": {
                k: v.isoformat() if hasattr(v, "isoformat") else v
                for k, v in detail.get_provenance(result).items()
            },
            "verification": (
                {
                    "status": verification["status"],
                    "checks": [
                        {"name": c.get("name"), "status": c.get("status")}
                        for c in verification["checks"] or []
                    ],
                }
                if verification
                else None
            ),
            "receipt": receipt,
            "page": result_url(result.pk),
            "api": reverse("public-api-result", args=[result.pk]),
        }

    return cached(f"mcp:provenance:{result_id}", build)


@_django
def compare_iso_speed(
    base_result_id: int, other_result_id: int, speed: float | None = None
) -> dict:
    """Two results compared at the same per-agent speed: each one's throughput per
    accelerator read off its Pareto frontier (interpolated linearly, never extrapolated) at
    every tier speed of their tier sets and at `speed` (tok/s) if given, with the ratio of
    the other to the base; also at common concurrencies and at N = 1. The public API's
    compare (/api/v1/public/compare/)."""
    if base_result_id == other_result_id:
        raise ToolError("other_result_id: give two different results")
    if speed is not None and not (0 < speed < float("inf")):
        raise ToolError("speed: a positive number of tok/s")
    ids = [base_result_id, other_result_id]

    def build() -> dict:
        try:
            return api._compare(ids, speed, None)
        except NotFound as exc:
            raise ToolError(f"result_id: {exc.detail}") from None

    return cached(f"mcp:compare:{ids}:{speed}", build)


@_django
def pair_history(model: str, hardware: str, include_simulated: bool = False) -> dict:
    """Every result of a model on a hardware system over time, oldest first, whatever its
    status (superseded and invalidated ones with their reason), as the history page lists
    them: max agents per tier, accelerators used, engine."""

    def build() -> dict:
        m = AIModel.objects.filter(slug=model).first()
        if m is None:
            raise ToolError(f"model: no model {model!r}")
        h = HardwareSystem.objects.filter(slug=hardware).first()
        if h is None:
            raise ToolError(f"hardware: no hardware system {hardware!r}")
        qs = Result.objects.for_chart().filter(model=m, hardware=h).order_by("published_at")
        if not include_simulated:
            qs = qs.filter(is_simulated=False)
        return {
            "model": model,
            "hardware": hardware,
            "results": [
                {
                    "id": r.pk,
                    "label": r.label,
                    "status": r.status,
                    "status_reason": r.status_reason,
                    "is_simulated": r.is_simulated,
                    "published_at": r.published_at.isoformat(),
                    "accelerators_used": r.accelerators_used,
                    "max_agents": r.max_agents,
                    "page": result_url(r.pk),
                }
                for r in qs
            ],
            "page": reverse("history", args=[model, hardware]),
        }

    return cached(f"mcp:history:{model}:{hardware}:{include_simulated}", build)


TOOLS = (list_models, list_hardware, frontier, result_provenance, compare_iso_speed, pair_history)


def build_server() -> MCPServer:
    server = MCPServer(
        "agentperf-leaderboard",
        title="AgentPerf Leaderboard (public data, read-only)",
        instructions=INSTRUCTIONS,
        version="1",
        log_level="WARNING",
    )
    for tool in TOOLS:
        server.add_tool(tool, annotations=READ_ONLY)
    return server


# --- HTTP: throttle and app ----------------------------------------------------------


class McpThrottle(AnonThrottle):
    """The public API's anonymous rate, counted under keys of its own."""

    cache_format = "throttle_mcp_%(scope)s_%(ident)s"


def _throttle_wait(scope: Scope) -> float | None:
    """None when the request may go on, else the seconds to wait."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    # what the throttle's client address reads (core.logins.client_address): the peer, and
    # X-Forwarded-For behind TRUSTED_PROXY_COUNT proxies
    request = SimpleNamespace(
        headers={k: v for k, v in headers.items() if k == "x-forwarded-for"},
        META={
            "REMOTE_ADDR": (scope.get("client") or ("", 0))[0],
            "HTTP_X_FORWARDED_FOR": headers.get("x-forwarded-for", ""),
        },
        user=AnonymousUser(),
    )
    throttle = McpThrottle()
    if throttle.allow_request(request, None):
        return None
    return throttle.wait() or 1.0


def _django_throttle_wait(scope: Scope) -> float | None:
    close_old_connections()
    try:
        return _throttle_wait(scope)
    finally:
        close_old_connections()


class Throttled:
    """ASGI middleware: a 429 with Retry-After past the anonymous rate."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            wait = await anyio.to_thread.run_sync(_django_throttle_wait, scope)
            if wait is not None:
                body = b'{"error": {"code": "throttled", "message": "too many requests"}}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 429,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"retry-after", str(int(wait) + 1).encode()),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def transport_security() -> TransportSecuritySettings:
    """Host and Origin checks (DNS rebinding) from the site's ALLOWED_HOSTS."""
    hosts = [h for h in settings.ALLOWED_HOSTS if h]
    if "*" in hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    names = [h.lstrip(".") for h in hosts]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[n for h in names for n in (h, f"{h}:*")],
        allowed_origins=[
            o
            for h in names
            for scheme in ("http", "https")
            for o in (f"{scheme}://{h}", f"{scheme}://{h}:*")
        ],
    )


def asgi_app() -> ASGIApp:
    """The MCP endpoint at PATH, throttled (a Starlette app with the SDK's lifespan)."""
    app = build_server().streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        json_response=True,
        transport_security=transport_security(),
    )
    return Throttled(app)
