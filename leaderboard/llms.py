"""`/llms.txt`: the site described for machines (the llmstxt.org shape: a title, a
one-paragraph summary, then sections of links), built from what the site serves now.

Nothing in it is a copy that could go stale: the URLs come from the URL map, the models,
hardware systems and tier sets from the database, the engine's figures from the engine
(`leaderboard.methodology.engine_constants`, as the methodology page reads them), the
metric definitions from docs/engine.md itself ("Definitions", "Frontier and
comparisons"), and the dump from the newest export's manifest. Cached per publish
generation like a page (docs/api.md "llms.txt").
"""

from __future__ import annotations

import re
from pathlib import Path

from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_GET

from agentperf.engine import cli
from catalog.models import AIModel, HardwareSystem, SloTier, SloTierSet
from leaderboard import links
from leaderboard.cache import cached
from leaderboard.httpcache import cache_public
from leaderboard.methodology import engine_constants
from leaderboard.models import Result

ENGINE_DOC = Path(__file__).resolve().parent.parent / "docs" / "engine.md"
# the paragraphs of docs/engine.md "Definitions" that define what a result reports
DEFINITIONS = (
    "Percentiles: nearest rank",
    "Throughput per accelerator.",
    "Tier verdict.",
    "Window.",
)
# the files of a dump (leaderboard.export.bundle_files), newest at /data/latest/<name>
DUMP_FILES = (
    ("results.json", "each result as the public API returns it"),
    ("results.csv", "one row per result and tier"),
    ("points.csv", "one row per frontier point"),
    ("manifest.json", "the files with their sha256 and sizes, and the counts"),
)
SUMMARY = (
    "AgentPerf is an open benchmark of LLM inference serving on agentic coding work. "
    "Vendors submit a deployment (engine, version, topology, parallelism, precision, "
    "speculative decoding); the platform replays recorded multi-turn coding-agent sessions "
    "against it, finds how many concurrent agents it serves at each service tier (p25 "
    "output speed per agent and time to first token), verifies the run, and after review "
    "publishes frontier charts (throughput per accelerator against per-agent speed) with "
    "every parameter of every result."
)


def _section(doc: str, heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", doc, re.S | re.M)
    if match is None:
        raise LookupError(f"docs/engine.md has no section {heading!r}")
    return match.group(1).strip()


def engine_definitions() -> list[str]:
    """The defining paragraphs of docs/engine.md, each as written there (reflowed)."""
    doc = ENGINE_DOC.read_text()
    definitions = _section(doc, "Definitions")
    out = []
    for lead in DEFINITIONS:
        para = next(p for p in definitions.split("\n\n") if p.startswith(f"**{lead}"))
        out.append(" ".join(line.strip() for line in para.splitlines()))
    frontier = _section(doc, "Frontier and comparisons")
    out.append(" ".join(line.strip() for line in frontier.splitlines()))
    return out


def _url(request: HttpRequest, name: str, *args) -> str | None:
    try:
        return links.absolute(request, reverse(name, args=args))
    except NoReverseMatch:  # a part of the site this deployment does not mount
        return None


def _link(request: HttpRequest, name: str, *args: object) -> str:
    """The absolute URL of ``name``, or "" where this deployment does not mount it."""
    return _url(request, name, *args) or ""


def _metric_lines(request: HttpRequest) -> list[str]:
    """The preamble and "Metric definitions": the engine's own figures and docs/engine.md's
    definitions, then the methodology link."""
    engine = engine_constants()
    lines = [
        "Results are published only after verification and review. Simulated results (from the "
        "platform's simulated serving system, not measured hardware) are marked "
        "`is_simulated` everywhere and left out of rankings unless asked for "
        "(`?simulated=1`). Power figures are either measured (runner-host telemetry) or, for "
        "simulated results only, modelled, and always labelled which.",
        "",
        "## Metric definitions",
        "",
        f"- Concurrency N: N simulated coding agents replaying recorded sessions turn by turn. "
        f"A trial warms up for {cli.REAL_WARMUP_S:g} s, then measures a "
        f"{cli.REAL_DURATION_S:g} s window (the engine's defaults against a real endpoint; "
        "each result shows its own).",
        "- Max agents at a tier: the highest N at which the tier passed, found by a ramp "
        f"({', '.join(str(n) for n in engine['ramp'])}, cap {engine['cap']}), a bisection to "
        f"max(1, {engine['tolerance_pct']:g}% of the highest pass) and a confirmation trial; "
        f"at most {engine['max_trials']} trials. A tier needs at least "
        f"{engine['min_requests']} measured requests.",
        "- TTFT percentiles reported: "
        + ", ".join(f"p{p}" for p in engine["ttft_percentiles"])
        + ".",
        "- Search flags a result can carry: "
        + "; ".join(f"`{flag}` ({meaning})" for flag, meaning in engine["flags"])
        + ".",
    ]
    lines += [f"- {para}" for para in engine_definitions()]
    lines += ["", f"Full methodology: {_link(request, 'methodology')}", ""]
    return lines


def _tier_lines() -> list[str]:
    """ "Service tiers": every tier set in the catalog with its tiers' thresholds."""
    lines = ["## Service tiers", ""]
    sets = SloTierSet.objects.select_related("model").order_by("model__name", "-effective_date")
    tiers: dict[int, list[SloTier]] = {}
    for tier in SloTier.objects.filter(tier_set__in=sets).order_by("order"):
        tiers.setdefault(tier.tier_set_id, []).append(tier)
    for ts in sets:
        owner = ts.model.name if ts.model else "project default"
        lines.append(f"- {ts.name} v{ts.version} ({owner}, effective {ts.effective_date}):")
        for t in tiers.get(ts.pk, []):
            lines.append(
                f"  - {t.name}: p25 output speed ≥ {t.min_p25_output_speed:g} tok/s per agent, "
                f"TTFT p{t.ttft_percentile} ≤ {t.max_ttft_s:g} s, "
                f"error rate ≤ {t.max_error_rate:.1%}"
            )
    if not sets:
        lines.append("- (no tier sets in the catalog yet)")
    return lines


def _api_lines(request: HttpRequest, newest: list[int]) -> list[str]:
    """ "Public read API" and "MCP server": the read endpoints, with the newest results as
    examples where there are any."""

    def url(name: str, *args: object) -> str:
        return _link(request, name, *args)

    return [
        "",
        "## Public read API (anonymous, JSON, throttled)",
        "",
        f"- [Models]({url('public-api-models')}): the catalog's served models, each with its "
        "published result count; `/{slug}/` adds its tier set",
        f"- [Hardware]({url('public-api-hardware-list')}): hardware systems; `/{{slug}}/` one",
        f"- [Results]({url('public-api-results')}): published results; filters `model`, "
        "`hardware`, `status` (published, superseded, invalidated, all), `simulated`",
        f"- One result: {url('public-api-results')}{{id}}/ (points with 95% intervals, "
        "tiers, brackets, engine, provenance, redacted config, verification, energy"
        + (f"; e.g. [the newest]({url('public-api-result', newest[0])})" if newest else "")
        + ")",
        f"- Compare: {url('public-api-compare')}?r={{id}}&r={{id}} (2 to 4 results at "
        "iso-speed, iso-concurrency and single-agent speed, as ratios to the first"
        + (
            f"; e.g. [the two newest]({url('public-api-compare')}?r={newest[0]}&r={newest[1]})"
            if len(newest) > 1
            else ""
        )
        + ")",
        *(
            [
                f"- Signed measurement receipts: {url('public-api-results')}{{id}}/receipt/ "
                f"(DSSE envelopes), checked against [the signing keys]({keys})"
            ]
            if (keys := _url(request, "public-api-receipt-keys"))
            else []
        ),
        f"- [OpenAPI schema]({url('api-schema')}) and [its browsable docs]({url('api-docs')})",
        "",
        "## MCP server",
        "",
        "- A read-only Model Context Protocol server (streamable HTTP, anonymous, throttled) "
        "serves the same data as tools: list_models, list_hardware, frontier, "
        "result_provenance, compare_iso_speed, pair_history. It runs beside the site "
        "(`manage.py mcp_server`, path `/mcp`)"
        + (f", here at {mcp}." if (mcp := links.mcp_url()) else "."),
    ]


def _data_lines(request: HttpRequest) -> list[str]:
    """ "Data dumps" and "JSON Schemas": the newest export's files and the schemas served."""
    lines = [
        "",
        "## Data dumps",
        "",
        f"- [Data & API page]({_link(request, 'data')}): the newest bundle of every published "
        "result, superseded and invalidated ones with their status (each file below redirects "
        "to a short-lived storage link; 404 before the first export)",
    ]
    for name, what in DUMP_FILES:
        lines.append(f"- [{name}]({_link(request, 'data-file', name)}): {what}")
    lines += ["", "## JSON Schemas", ""]
    for name, title in (
        ("vendor-api:deployment-config-schema", "Deployment config"),
        ("ladder-schema", "Ablation ladder"),
    ):
        if link := _url(request, name):
            lines.append(f"- [{title}]({link})")
    return lines


def _page_lines(request: HttpRequest) -> list[str]:
    """ "Pages" and "Optional": home, each model and hardware system with published results,
    the compare page and the site status."""

    def url(name: str, *args: object) -> str:
        return _link(request, name, *args)

    lines = ["", "## Pages", ""]
    lines.append(f"- [Home]({url('home')}): max agents per model and hardware system")
    models = AIModel.objects.filter(results__status=Result.STATUS_PUBLISHED).distinct()
    for m in models.order_by("name"):
        lines.append(
            f"- [{m.name}]({url('model-detail', m.slug)}): frontier chart and results "
            f"(embed: {url('embed-model', m.slug)}, image: {url('embed-model-image', m.slug, 'png')})"
        )
    systems = HardwareSystem.objects.filter(results__status=Result.STATUS_PUBLISHED).distinct()
    for h in systems.order_by("name"):
        lines.append(f"- [{h.name}]({url('hardware-detail', h.slug)}): results on this system")
    lines += ["", "## Optional", ""]
    lines.append(f"- [Compare page]({url('compare')}): pick 2 to 4 results")
    lines.append(f"- [Site status]({url('health')})")
    return lines


def build(request: HttpRequest) -> str:
    """The whole of /llms.txt: title, summary, then its sections in order."""
    newest = list(Result.objects.public().values_list("pk", flat=True)[:2])
    lines = ["# AgentPerf Leaderboard", "", f"> {SUMMARY}", ""]
    lines += _metric_lines(request)
    lines += _tier_lines()
    lines += _api_lines(request, newest)
    lines += _data_lines(request)
    lines += _page_lines(request)
    return "\n".join(lines) + "\n"


@cache_public("page", ("index", "catalog", "methodology", "dump"))
@require_GET
def llms_txt(request: HttpRequest) -> HttpResponse:
    # absolute URLs: PUBLIC_BASE_URL, else the host the reader asked for (ALLOWED_HOSTS)
    text = cached(f"llms:{links.cache_scope(request)}", lambda: build(request))
    return HttpResponse(text, content_type="text/plain; charset=utf-8")
