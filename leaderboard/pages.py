"""What each public page shows, as plain (cacheable) data: tables, figures, provenance.

Views stay thin: they parse the query string, fetch one of these through the cache and
render it (or export one of its tables as CSV). Every builder runs a fixed number of
queries whatever the number of results (tests/leaderboard/test_queries.py).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Sequence

from django.core.cache import cache
from django.db.models import Prefetch
from django.urls import NoReverseMatch, reverse

from catalog.fields import HARDWARE_FIELDS, MODEL_FIELDS, sourced_rows
from catalog.models import AIModel, HardwareSystem, SloTier, SloTierSet
from catalog.services import default_tier_set_for
from leaderboard import charts, configview
from leaderboard.energy import MODELLED, labelled, power_source, result_energy
from leaderboard.loadgen import load_generator_table
from leaderboard.methodology import engine_constants
from leaderboard.models import Result
from leaderboard.reproduce import reproduce_command
from leaderboard.tables import Column, LazyRows, Table
from runner import contract
from runner.engine import frontier
from submissions.models import Artifact

LATEST_COUNT = 10
MAX_COMPARE = 4


# --- shared pieces -------------------------------------------------------------------


def tier_guides(tier_set: SloTierSet | None) -> list[tuple[str, float]]:
    if tier_set is None:
        return []
    return [(t.name, t.min_p25_output_speed) for t in tier_set.tiers.all()]


@functools.lru_cache(maxsize=8192)
def result_url(pk: int) -> str:
    # a page rebuild asks for each result's URL two or three times; reverse() costs ~40 µs
    return reverse("result-detail", args=[pk])


def hidden_simulated_count(include_simulated: bool, **filters) -> int:
    if include_simulated:
        return 0
    return Result.objects.filter(
        status=Result.STATUS_PUBLISHED, is_simulated=True, **filters
    ).count()


POINTS_TIMEOUT_S = 7 * 24 * 3600
# v2: each compact point carries its interval bounds (charts.compact_points)
POINTS_KEY = "lb:points:v2:"


def chart_points(results: Sequence[Result]) -> dict[int, list[list]]:
    """Compact chart points per result id. A result's points never change after publishing,
    so they are cached per result (no generation): a page after a publish decodes only the
    new result's points document, not all of them (one query for the misses, if any)."""
    keys = {f"{POINTS_KEY}{r.pk}": r.pk for r in results}
    out = {keys[k]: v for k, v in cache.get_many(list(keys)).items()}
    missing = [r.pk for r in results if r.pk not in out]
    if missing:
        fresh = {
            pk: charts.compact_points(points)
            for pk, points in Result.objects.filter(pk__in=missing).values_list("pk", "points")
        }
        cache.set_many({f"{POINTS_KEY}{pk}": v for pk, v in fresh.items()}, POINTS_TIMEOUT_S)
        out.update(fresh)
    return out


def single_agent_speed(points: list[list]) -> float | None:
    """p25 speed at N = 1 (repeats averaged) from compact points; None if N = 1 wasn't run."""
    at_one = [p[1] for p in points if p[0] == 1]
    return sum(at_one) / len(at_one) if at_one else None


def quality_cell(quality: dict) -> str:
    """The quality floor in one cell: the figures, or why there are none."""
    status = quality.get("status")
    if status in ("pass", "fail") and quality.get("mean_kl") is not None:
        return (
            f"{status}: KL {float(quality['mean_kl']):.4f} · "
            f"top-1 {float(quality.get('top1_agreement') or 0):.1%}"
        )
    return {"simulated": "simulated", "no_reference": "no reference"}.get(
        str(status), "not measured"
    )


FLAG_TEXT = {
    "failed_confirmation": "failed confirmation",
    "non_monotone": "non-monotone",
    "capped": "capped (no fail up to the cap)",
    "unconfirmed": "unconfirmed",
    "trial_budget_exhausted": "trial budget exhausted",
}


def bracket_text(bracket: dict | None) -> str | None:
    """A max-agents figure's bracket and flags in one cell: "12 … 14 · confirmed ·
    marginal" (highest pass … lowest fail); None when the result has no bracket stored."""
    if not bracket:
        return None
    low = bracket.get("lowest_fail")
    parts = [
        f"{bracket.get('highest_pass', 0):,} … {low:,}"
        if low is not None
        else f"{bracket.get('highest_pass', 0):,} … no fail"
    ]
    if bracket.get("confirmed"):
        parts.append("confirmed")
    parts += [FLAG_TEXT.get(f, f) for f in bracket.get("flags") or [] if f != "marginal"]
    if bracket.get("marginal"):
        parts.append("marginal")
    return " · ".join(parts)


def power_cell(result: Result, tier: str) -> str | None:
    """A result's agents per MW at ``tier`` as text with its label: measured from runner-host
    telemetry, or (simulated results only) modelled, with tokens per joule beside it; None
    when there is neither. A measured result never shows a modelled figure."""
    source = power_source(result)
    if source == MODELLED:
        t = ((result.modelled_power or {}).get("tiers") or {}).get(tier) or {}
        apm = t.get("agents_per_mw")
        if apm is None:
            return None
        tpj = t.get("tokens_per_joule")
        return f"{apm:,.0f}" + (f" · {tpj:,.2f} tok/J" if tpj else "") + f" ({MODELLED})"
    if source is not None:
        return labelled((result.agents_per_mw or {}).get(tier), source)
    return None


def results_table(
    results: Sequence[Result],
    tier_names: Sequence[str],
    *,
    points: dict[int, list[list]],
    name: str = "results",
    title: str = "Results",
    show_model: bool = False,
    show_hardware: bool = True,
    show_status: bool = False,
) -> Table:
    """One row per result: what a ranking needs, simulated ones labelled."""
    columns = [Column("label", "Result")]
    if show_model:
        columns.append(Column("model", "Model"))
    if show_hardware:
        columns.append(Column("hardware", "Hardware"))
    columns += [
        Column("published", "Published"),
        Column("accelerators_used", "Accelerators used", "int"),
    ]
    for t in tier_names:
        columns.append(Column(f"max_agents:{t}", f"Max agents @ {t}", "int", "none"))
        columns.append(Column(f"bracket:{t}", f"Pass … fail @ {t}", "text", "not recorded"))
    if tier_names:
        columns.append(
            Column(f"per_accel:{tier_names[0]}", f"Agents / accel. @ {tier_names[0]}", "float3")
        )
    if tier_names:
        columns.append(
            Column(
                f"power:{tier_names[0]}", f"Agents / MW @ {tier_names[0]}", "text", "not measured"
            )
        )
    columns += [
        Column("single_agent_speed", "Single-agent speed (tok/s)", "float1"),
        Column("quality", "Quality (KL · top-1)"),
        Column("simulated", "Simulated", "bool"),
    ]
    if show_status:
        columns.append(Column("status", "Status"))
    rows = []
    urls: dict[tuple[str, str], str] = {}

    def url(name: str, slug: str) -> str:
        if (name, slug) not in urls:
            urls[name, slug] = reverse(name, args=[slug])
        return urls[name, slug]

    for r in results:
        row = {
            "label": r.display_label,
            "model": r.model.name,
            "hardware": r.hardware.name,
            "published": r.published_at.date().isoformat(),
            "accelerators_used": r.accelerators_used,
            "single_agent_speed": single_agent_speed(points.get(r.pk, [])),
            "quality": quality_cell(r.quality or {}),
            "simulated": r.is_simulated,
            "status": r.status + (f": {r.status_reason}" if r.status_reason else ""),
            "result_id": r.pk,
            "_links": {
                "label": result_url(r.pk),
                "model": url("model-detail", r.model.slug),
                "hardware": url("hardware-detail", r.hardware.slug),
            },
            "_class": "sim" if r.is_simulated else "",
        }
        for t in tier_names:
            row[f"max_agents:{t}"] = r.max_agents.get(t)
            row[f"bracket:{t}"] = bracket_text((r.brackets or {}).get(t))
        if tier_names:
            row[f"per_accel:{tier_names[0]}"] = r.agents_per_accelerator.get(tier_names[0])
            row[f"power:{tier_names[0]}"] = power_cell(r, tier_names[0])
        rows.append(row)
    columns.append(Column("result_id", "Result ID", "int"))
    return Table(name, title, columns, rows)


def _figure(
    series: list[dict],
    tiers: Iterable[tuple[str, float]],
    *,
    log: bool,
    marker_speed: float | None = None,
) -> dict:
    figure = charts.frontier_figure(series, tiers=tiers, log=log, marker_speed=marker_speed)
    return {
        "json": charts.figure_json(figure),
        "traces": len(series),
        "log": log,
        "simulated": any(s["is_simulated"] for s in series),
    }


def _points_table(series: list[dict], name: str = "points") -> Table:
    """Every frontier point of every charted result (the chart's data, readable without JS).

    Its rows are built only when used (CSV, or a page small enough to list them inline)."""
    columns = [
        Column("result", "Result"),
        Column("concurrency", "Concurrency (agents)", "int"),
        Column("p25_speed", "p25 speed (tok/s)", "float1"),
        Column("p25_speed_low", "p25 speed 95% CI low", "float1", "not measured"),
        Column("p25_speed_high", "p25 speed 95% CI high", "float1", "not measured"),
        Column("ttft_p75_s", "TTFT p75 (s)", "float2", "∞ (failed requests)"),
        Column("throughput_per_accelerator", "Throughput / accel. (tok/s)", "float0"),
        Column("throughput_low", "Throughput 95% CI low", "float0", "not measured"),
        Column("throughput_high", "Throughput 95% CI high", "float0", "not measured"),
        Column("agents_per_accelerator", "Agents / accel.", "float3"),
        Column("simulated", "Simulated", "bool"),
        Column("result_id", "Result ID", "int"),
    ]
    rows = LazyRows(sum(len(s["points"]) for s in series), functools.partial(_points_rows, series))
    return Table(name, "Frontier points", columns, rows, inline_limit=600)


def _points_rows(series: list[dict]) -> list[dict]:
    rows = []
    for s in series:
        name_ = f"{s['name']} [simulated]" if s["is_simulated"] else s["name"]
        links = {"result": result_url(s["id"])}
        for n, x, y, ttft, apa, _, bounds in s["points"]:
            rows.append(
                {
                    "result": name_,
                    "concurrency": n,
                    "p25_speed": x,
                    "p25_speed_low": bounds[0],
                    "p25_speed_high": bounds[1],
                    "ttft_p75_s": ttft,
                    "throughput_per_accelerator": y,
                    "throughput_low": bounds[2],
                    "throughput_high": bounds[3],
                    "agents_per_accelerator": apa,
                    "simulated": s["is_simulated"],
                    "result_id": s["id"],
                    "_links": links,
                }
            )
    return rows


# --- home ----------------------------------------------------------------------------


def home(*, tier: str | None, include_simulated: bool) -> dict:
    results = list(Result.objects.public(include_simulated=include_simulated).for_chart())
    # Nothing measured yet (a fresh `make demo`): show the simulated results, each one
    # labelled, rather than an empty page; they are still never ranked with measured ones.
    simulated_only = False
    if not results and not include_simulated:
        results = list(Result.objects.public(include_simulated=True).for_chart())
        simulated_only = bool(results)
    tier_set = default_tier_set_for()
    names = [t for t, _ in tier_guides(tier_set)]
    for r in results:
        names += [n for n in r.max_agents if n not in names]
    chosen = tier if tier in names else (names[0] if names else None)
    models = sorted({r.model for r in results}, key=lambda m: m.name)
    systems = sorted({r.hardware for r in results}, key=lambda h: h.name)
    best: dict[tuple[int, int], Result] = {}
    for r in results:
        key = (r.model_id, r.hardware_id)
        value = r.max_agents.get(chosen, 0) if chosen else 0
        if key not in best or value > best[key].max_agents.get(chosen, 0):
            best[key] = r
    columns = [Column("model", "Model")] + [
        Column(f"hw:{h.slug}", f"{h.name} [simulated]" if simulated_only else h.name, "int", "—")
        for h in systems
    ]
    rows = []
    for m in models:
        row: dict = {"model": m.name, "_links": {"model": reverse("model-detail", args=[m.slug])}}
        for h in systems:
            r = best.get((m.pk, h.pk))
            if r is None:
                continue
            row[f"hw:{h.slug}"] = r.max_agents.get(chosen) if chosen else None
            if row[f"hw:{h.slug}"] is None:
                row[f"hw:{h.slug}"] = 0
            row["_links"][f"hw:{h.slug}"] = result_url(r.pk)
        rows.append(row)
    matrix = Table(
        "matrix",
        f"Max agents at {chosen}" if chosen else "Max agents",
        columns,
        rows,
        caption="Best published result per model and hardware system; 0 = the tier never "
        "passed; — = not measured.",
    )
    latest = results_table(
        results[:LATEST_COUNT],
        [chosen] if chosen else [],
        points=chart_points(results[:LATEST_COUNT]),
        name="latest",
        title="Latest results",
        show_model=True,
    )
    return {
        "tier": chosen,
        "tier_names": names,
        "tables": {"matrix": matrix, "latest": latest},
        "hidden_simulated": 0 if simulated_only else hidden_simulated_count(include_simulated),
        "simulated_only": simulated_only,
        "catalog": {
            "models": AIModel.objects.count(),
            "hardware": HardwareSystem.objects.count(),
        },
    }


# --- model and hardware pages --------------------------------------------------------


def model_page(
    *, slug: str, include_simulated: bool, selected: Sequence[int], log: bool
) -> dict | None:
    model = AIModel.objects.filter(slug=slug).first()
    if model is None:
        return None
    tier_set = default_tier_set_for(model)
    tiers = tier_guides(tier_set)
    results = list(
        Result.objects.public(include_simulated=include_simulated).for_chart().filter(model=model)
    )
    shown = [r for r in results if r.pk in selected] if selected else results
    points = chart_points(results)
    series = [charts.result_series(r, points=points[r.pk]) for r in shown]
    names = [t for t, _ in tiers]
    return {
        "model": model,
        "rows": sourced_rows(model, MODEL_FIELDS),
        "tier_set": tier_set,
        "tiers": tiers,
        "results": [
            {"id": r.pk, "label": r.display_label, "hardware": r.hardware.name} for r in results
        ],
        "selected": [r.pk for r in shown],
        "figure": _figure(series, tiers, log=log) if series else None,
        "tables": {
            "results": results_table(results, names, points=points),
            "points": _points_table(series),
        },
        "history": sorted(
            {(r.hardware.slug, r.hardware.name) for r in results}, key=lambda h: h[1]
        ),
        "hidden_simulated": hidden_simulated_count(include_simulated, model=model),
    }


def hardware_page(*, slug: str, include_simulated: bool, log: bool) -> dict | None:
    system = HardwareSystem.objects.filter(slug=slug).first()
    if system is None:
        return None
    results = list(
        Result.objects.public(include_simulated=include_simulated)
        .for_chart()
        .filter(hardware=system)
        .order_by("model__name", "-published_at")
    )
    points = chart_points(results)
    tier_set = default_tier_set_for()
    tiers = tier_guides(tier_set)
    series = [
        charts.result_series(r, points=points[r.pk], name=f"{r.model.name} — {r.label}")
        for r in results
    ]
    by_model: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_model[r.model.name].append(r)
    return {
        "system": system,
        "rows": sourced_rows(system, HARDWARE_FIELDS),
        "tiers": tiers,
        "figure": _figure(series, tiers, log=log) if series else None,
        "models": [
            {"name": name, "slug": rs[0].model.slug, "count": len(rs)}
            for name, rs in by_model.items()
        ],
        "tables": {
            "results": results_table(
                results,
                [t for t, _ in tiers],
                points=points,
                show_model=True,
                show_hardware=False,
            ),
            "points": _points_table(series),
        },
        "hidden_simulated": hidden_simulated_count(include_simulated, hardware=system),
    }


# --- result page ---------------------------------------------------------------------


def _raw_data_links(result: Result, artifacts: list[Artifact]) -> list[dict]:
    links = []
    for a in artifacts:
        try:
            url = reverse("result-raw-data", args=[result.pk, a.pk])
        except NoReverseMatch:  # pragma: no cover - the URL is part of this app
            continue
        links.append({"url": url, "key": a.storage_key, "size": a.size, "sha256": a.sha256})
    return links


def trials_table(result: Result, trials, tier_names: Sequence[str]) -> Table:
    columns = [
        Column("index", "Trial", "int"),
        Column("phase", "Phase"),
        Column("concurrency", "Concurrency", "int"),
        Column("p25_speed", "p25 speed (tok/s)", "float1"),
        Column("median_speed", "Median speed (tok/s)", "float1"),
        Column("ttft_p50_s", "TTFT p50 (s)", "float2", "∞"),
        Column("ttft_p75_s", "TTFT p75 (s)", "float2", "∞"),
        Column("ttft_p95_s", "TTFT p95 (s)", "float2", "∞"),
        Column("ttft_p99_s", "TTFT p99 (s)", "float2", "∞"),
        Column("throughput_per_accelerator", "Throughput / accel. (tok/s)", "float0"),
        Column("agents_per_accelerator", "Agents / accel.", "float3"),
        Column("error_rate", "Error rate", "pct"),
        Column("cache_hit_ratio", "Cache hit", "pct"),
        Column("mean_in_flight", "Mean in flight", "float1"),
        Column("requests", "Requests", "int"),
        Column("power_w", "Power (W)", "float0", "not measured"),
    ]
    modelled_w = {
        p.get("index"): (p.get("modelled_energy") or {}).get("power_w") for p in result.points
    }
    if result.modelled_power:
        columns.append(Column("modelled_power_w", "Power (W, modelled)", "float0", "—"))
    columns += [Column(f"tier:{t}", t, "text", "—") for t in tier_names]
    columns.append(Column("simulated", "Simulated", "bool"))
    rows = []
    for t in trials:
        m = contract.trial_metrics(t.metrics)
        ttft = m.ttft_s
        row = {
            "index": t.index,
            "phase": t.phase,
            "concurrency": t.concurrency,
            "p25_speed": m.p25_output_speed,
            "median_speed": m.median_output_speed,
            "ttft_p50_s": ttft.get("p50"),
            "ttft_p75_s": ttft.get("p75"),
            "ttft_p95_s": ttft.get("p95"),
            "ttft_p99_s": ttft.get("p99"),
            "throughput_per_accelerator": m.throughput_per_accelerator,
            "agents_per_accelerator": t.concurrency / result.accelerators_used,
            "error_rate": m.error_rate,
            "cache_hit_ratio": m.cache_hit_ratio,
            "mean_in_flight": m.mean_in_flight,
            "requests": m.requests,
            "power_w": next(
                (p.get("power_w") for p in result.points if p.get("index") == t.index), None
            ),
            "modelled_power_w": modelled_w.get(t.index),
            "simulated": result.is_simulated,
        }
        verdicts = contract.trial_verdicts(t.verdicts)
        for name in tier_names:
            verdict = verdicts.get(name)
            row[f"tier:{name}"] = (
                None if verdict is None else ("pass" if verdict.passed else "fail")
            )
        rows.append(row)
    return Table("trials", "Trials", columns, rows)


def tiers_table(result: Result, tiers: Sequence[SloTier]) -> Table:
    columns = [
        Column("tier", "Tier"),
        Column("min_p25_speed", "Min p25 speed (tok/s)", "float0"),
        Column("max_ttft", "Max TTFT (s)", "float1"),
        Column("ttft_percentile", "TTFT percentile", "int"),
        Column("max_error_rate", "Max error rate", "pct"),
        Column("max_agents", "Max agents", "int", "never passed"),
        Column("highest_pass", "Highest pass", "int", "not recorded"),
        Column("lowest_fail", "Lowest fail", "int", "no fail"),
        Column("confirmed", "Confirmed", "bool"),
        Column("marginal", "Marginal", "bool"),
        Column("agents_per_accelerator", "Agents / accel.", "float3"),
        Column("agents_per_mw", "Agents / MW", "float0", "not measured"),
    ]
    modelled = ((result.modelled_power or {}).get("tiers") or {}) if result.is_simulated else {}
    if result.is_simulated and result.modelled_power:
        columns.append(Column("modelled_agents_per_mw", "Agents / MW (modelled)", "float0", "—"))
    columns += [
        Column("flags", "Flags"),
        Column("simulated", "Simulated", "bool"),
    ]
    summary = (result.run.search_summary or {}).get("tiers") or {}
    rows = []
    for t in tiers:
        bracket = (result.brackets or {}).get(t.name) or {}
        flags = bracket.get("flags") or (summary.get(t.name) or {}).get("flags") or []
        rows.append(
            {
                "highest_pass": bracket.get("highest_pass"),
                "lowest_fail": bracket.get("lowest_fail"),
                "confirmed": bracket.get("confirmed"),
                "marginal": bracket.get("marginal"),
                "tier": t.name,
                "min_p25_speed": t.min_p25_output_speed,
                "max_ttft": t.max_ttft_s,
                "ttft_percentile": t.ttft_percentile,
                "max_error_rate": t.max_error_rate,
                "max_agents": result.max_agents.get(t.name),
                "agents_per_accelerator": result.agents_per_accelerator.get(t.name),
                "agents_per_mw": (result.agents_per_mw or {}).get(t.name),
                "modelled_agents_per_mw": (modelled.get(t.name) or {}).get("agents_per_mw"),
                "flags": ", ".join(FLAG_TEXT.get(f, f) for f in flags) or None,
                "simulated": result.is_simulated,
                "_class": "marginal" if bracket.get("marginal") else "",
            }
        )
    return Table(
        "tiers",
        "Max agents per tier",
        columns,
        rows,
        caption="Max agents is the highest concurrency that passed with no fail below it; "
        "the lowest fail bounds it from above. Confirmed: a repeat trial passed too. "
        "Marginal: at a bound, the 95% session-bootstrap interval of speed or TTFT "
        "straddled the tier's threshold (the verdict could go either way).",
    )


def timeline_trials(trials: Iterable) -> list[dict]:
    """The trial picker of the session timeline (templates/leaderboard/_timeline.html), from
    Trial rows or dicts with the same keys."""

    def get(t, name: str):
        return t.get(name) if isinstance(t, dict) else getattr(t, name)

    return sorted(
        (
            {
                "index": get(t, "index"),
                "concurrency": get(t, "concurrency"),
                "phase": get(t, "phase"),
                "records": bool(get(t, "raw_records_key")),
            }
            for t in trials
        ),
        key=lambda t: t["index"],
    )


def energy_table(result: Result, energy: dict) -> Table:
    """Measured energy at each tier's max agents (leaderboard.energy); empty when none."""
    columns = [
        Column("tier", "Tier"),
        Column("max_agents", "Max agents", "int"),
        Column("power_w", "Measured power (W)", "float0", "not measured"),
        Column("agents_per_mw", "Agents / MW", "float0", "not computed"),
        Column("tokens_per_joule", "Tokens / J", "float2", "not computed"),
        Column("coverage", "Window coverage", "pct"),
        Column("accelerators", "Accelerators measured / used"),
    ]
    rows = [
        {
            "tier": name,
            "max_agents": t["max_agents"],
            "power_w": t.get("power_w"),
            "agents_per_mw": t.get("agents_per_mw"),
            "tokens_per_joule": t.get("tokens_per_joule"),
            "coverage": t.get("coverage"),
            "accelerators": f"{energy['accelerators_measured']} / {result.accelerators_used}",
        }
        for name, t in (energy.get("tiers") or {}).items()
    ]
    return Table("energy", "Measured energy at max agents", columns, rows)


def modelled_energy_table(result: Result) -> Table:
    """A simulated result's modelled power at each tier's max agents (leaderboard.energy);
    empty for a measured result or a profile that models no power."""
    columns = [
        Column("tier", "Tier"),
        Column("max_agents", "Max agents", "int"),
        Column("power_w", "Power (W, modelled)", "float0"),
        Column("power_w_per_accelerator", "Power / accel. (W, modelled)", "float0"),
        Column("agents_per_mw", "Agents / MW (modelled)", "float0"),
        Column("tokens_per_joule", "Tokens / J (modelled)", "float2", "—"),
        Column("source", "Power source"),
    ]
    tiers = ((result.modelled_power or {}).get("tiers") or {}) if result.is_simulated else {}
    rows = [
        {
            "tier": name,
            "max_agents": t["max_agents"],
            "power_w": t["power_w"],
            "power_w_per_accelerator": t["power_w"] / result.accelerators_used,
            "agents_per_mw": t["agents_per_mw"],
            "tokens_per_joule": t.get("tokens_per_joule"),
            "source": MODELLED,
        }
        for name, t in tiers.items()
    ]
    return Table(
        "modelled_energy",
        "Modelled power at max agents (simulated: modelled, not measured)",
        columns,
        rows,
        caption="From the simulator's power model: per accelerator, idle power plus the "
        "dynamic rest of a sourced TDP times each iteration's utilisation "
        "(docs/simulator.md). A model's figure, never a measurement.",
    )


def result_page(*, pk: int) -> dict | None:
    result = (
        Result.objects.select_related(
            "model",
            "hardware",
            "submission__org",
            "run__dataset",
            "run__verification",
            "tier_set",
        )
        .prefetch_related(
            Prefetch("tier_set__tiers", queryset=SloTier.objects.order_by("order")),
            "run__trials",
            Prefetch(
                "run__artifacts",
                queryset=Artifact.objects.filter(kind=Artifact.KIND_RAW_RECORDS).order_by(
                    "storage_key"
                ),
                to_attr="raw_artifacts",
            ),
        )
        .filter(pk=pk)
        .first()
    )
    if result is None:
        return None
    run = result.run
    submission = result.submission
    tiers = list(result.tier_set.tiers.all())
    tier_names = [t.name for t in tiers]
    guides = [(t.name, t.min_p25_output_speed) for t in tiers]
    series = [charts.result_series(result)]
    # a missing reverse one-to-one raises RelatedObjectDoesNotExist, an AttributeError
    verification = getattr(run, "verification", None)
    config = submission.config or {}
    roles = configview.roles(config)
    total_role_acc = sum(r.accelerators or 0 for r in roles)
    energy = result_energy(result)
    return {
        "result": result,
        "submission": submission,
        "run": run,
        "figure": _figure(series, guides, log=False),
        "tables": {
            "tiers": tiers_table(result, tiers),
            "trials": trials_table(result, run.trials.all(), tier_names),
            "load_generator": load_generator_table(run.trials.all()),
            "energy": energy_table(result, energy),
            "modelled_energy": modelled_energy_table(result),
            "points": _points_table(series),
        },
        "verification": verification,
        "checks": list((verification.checks if verification else None) or []),
        "config_groups": configview.grouped(config),
        "roles": roles,
        "roles_total": total_role_acc,
        "raw_data": _raw_data_links(result, run.raw_artifacts),
        "search_flags": s.flags if (s := contract.search_summary(run.search_summary)) else [],
        "timeline_trials": timeline_trials(run.trials.all()),
        "timeline_base": f"/api/v1/public/results/{result.pk}/trials/",
        "timeline_suffix": "/timeline/",
        "reproduce": reproduce_command(result.run.run_spec),
        "power_measured": result.agents_per_mw is not None,
        "energy": energy,
        "power_source": power_source(result),
        "modelled": result.modelled_power if result.is_simulated else None,
    }


# --- compare -------------------------------------------------------------------------


def _ratio_rows(values: list[float | None], row: dict) -> dict:
    """Each result's value in column v<i> and its ratio to the first in ratio<i>."""
    base = values[0]
    for i, v in enumerate(values):
        row[f"v{i}"] = v
        if i:
            row[f"ratio{i}"] = frontier.ratio(v, base)
    return row


def _compare_columns(
    results: list[Result], first: Column, kind: str, missing: str = "outside measured range"
) -> list[Column]:
    cols = [first]
    for i, r in enumerate(results):
        cols.append(Column(f"v{i}", r.display_label, kind, missing))
        if i:
            cols.append(
                Column(f"ratio{i}", f"{r.display_label} ÷ {results[0].display_label}", "ratio")
            )
    return cols


def compare_page(
    *, ids: Sequence[int], speed: float | None, concurrency: int | None, log: bool
) -> dict:
    """Ratios of results 2..n to result 1 (the baseline, first in the URL)."""
    by_pk = {
        r.pk: r
        for r in Result.objects.for_listing()
        .select_related("submission", "tier_set")
        .prefetch_related(Prefetch("tier_set__tiers", queryset=SloTier.objects.order_by("order")))
        .filter(pk__in=list(ids)[:MAX_COMPARE])
    }
    results = [by_pk[i] for i in ids if i in by_pk]
    missing = [i for i in ids if i not in by_pk]
    if len(results) < 2:
        return {
            "results": results,
            "missing": missing,
            "speed": speed,
            "concurrency": concurrency,
            "figure": None,
            "tables": {},
        }
    points = [r.frontier_points() for r in results]
    guides: list[tuple[str, float]] = []
    for r in results:
        for t in r.tier_set.tiers.all():
            if all(abs(t.min_p25_output_speed - s) > 1e-9 for _, s in guides):
                guides.append((t.name, t.min_p25_output_speed))
    guides.sort(key=lambda g: g[1])
    speed_rows = []
    for name, s in guides:
        row = {"speed": s, "label": f"{name} ({s:g} tok/s)"}
        speed_rows.append(_ratio_rows([frontier.throughput_at_speed(p, s) for p in points], row))
    if speed is not None:
        row = {"speed": speed, "label": f"your speed ({speed:g} tok/s)", "_class": "picked"}
        speed_rows.append(
            _ratio_rows([frontier.throughput_at_speed(p, speed) for p in points], row)
        )
    iso_speed = Table(
        "iso_speed",
        "Throughput per accelerator at the same per-agent speed",
        _compare_columns(results, Column("label", "p25 speed per agent"), "float0"),
        speed_rows,
        caption="Read off each result's frontier, interpolated linearly between its measured "
        "points; no value outside a result's measured speed range.",
    )
    common = frontier.common_concurrencies(*points) if points else []
    n_rows = []
    for n in common:
        row = {"label": f"N = {n}", "concurrency": n}
        n_rows.append(_ratio_rows([frontier.throughput_at_concurrency(p, n) for p in points], row))
    if concurrency is not None:
        row = {"label": f"your N = {concurrency}", "concurrency": concurrency, "_class": "picked"}
        n_rows.append(
            _ratio_rows([frontier.throughput_at_concurrency(p, concurrency) for p in points], row)
        )
    iso_n = Table(
        "iso_concurrency",
        "Throughput per accelerator at the same concurrency",
        _compare_columns(results, Column("label", "Concurrency (agents)"), "float0"),
        n_rows,
        caption="Concurrencies every result measured, plus yours (interpolated in N).",
    )
    single = [frontier.single_agent(p) for p in points]
    single_table = Table(
        "single_agent",
        "Single-agent speed (p25 output speed at N = 1)",
        _compare_columns(results, Column("label", ""), "float1", "N = 1 not run"),
        [
            _ratio_rows(
                [s[1] if s and s[0] == 1 else None for s in single],
                {"label": "p25 speed at N = 1 (tok/s)"},
            )
        ],
    )
    max_table = Table(
        "max_agents",
        "Max agents per tier",
        _compare_columns(results, Column("label", "Tier"), "int", "never passed"),
        [
            _ratio_rows(
                [r.max_agents.get(name) for r in results],
                {"label": name},
            )
            for name, _ in guides
        ],
    )
    brackets_table = Table(
        "max_agents_brackets",
        "Max agents: bracket and flags (highest pass … lowest fail)",
        [Column("label", "Tier")]
        + [Column(f"v{i}", r.display_label, "text", "not recorded") for i, r in enumerate(results)],
        [
            {
                "label": name,
                **{
                    f"v{i}": bracket_text((r.brackets or {}).get(name))
                    for i, r in enumerate(results)
                },
            }
            for name, _ in guides
        ],
    )
    power_table = Table(
        "power",
        "Agents per MW at max agents (each figure labelled measured or modelled)",
        [Column("label", "Tier")]
        + [Column(f"v{i}", r.display_label, "text", "not measured") for i, r in enumerate(results)],
        [
            {"label": name, **{f"v{i}": power_cell(r, name) for i, r in enumerate(results)}}
            for name, _ in guides
        ],
        caption="Measured: runner-host telemetry. Modelled: a simulated result's power model "
        "(never a measurement; no ratio is drawn between the two).",
    )
    diff = configview.diff([r.submission.config for r in results])
    diff_table = Table(
        "config_diff",
        "Configuration",
        [Column("field", "Field"), Column("changed", "Changed", "bool")]
        + [Column(f"c{i}", r.display_label) for i, r in enumerate(results)],
        [
            {
                "field": d.path,
                "changed": d.changed,
                **{f"c{i}": v for i, v in enumerate(d.values)},
                "_class": "changed" if d.changed else "",
            }
            for d in diff
        ],
    )
    series = [charts.result_series(r) for r in results]
    return {
        "results": results,
        "missing": missing,
        "speed": speed,
        "concurrency": concurrency,
        "figure": _figure(series, guides, log=log, marker_speed=speed) if series else None,
        "ranges": [frontier.speed_range(p) for p in points],
        "tables": {
            "iso_speed": iso_speed,
            "iso_concurrency": iso_n,
            "single_agent": single_table,
            "max_agents": max_table,
            "max_agents_brackets": brackets_table,
            "power": power_table,
            "config_diff": diff_table,
        },
        "changed_count": sum(1 for d in diff if d.changed),
    }


# --- history and methodology ---------------------------------------------------------


def history_page(
    *, model_slug: str, hardware_slug: str, include_simulated: bool, log: bool
) -> dict | None:
    model = AIModel.objects.filter(slug=model_slug).first()
    system = HardwareSystem.objects.filter(slug=hardware_slug).first()
    if model is None or system is None:
        return None
    qs = Result.objects.for_chart().filter(model=model, hardware=system).order_by("published_at")
    if not include_simulated:
        qs = qs.filter(is_simulated=False)
    results = list(qs)
    charted = [r for r in results if r.status != Result.STATUS_INVALIDATED]
    tier_set = default_tier_set_for(model)
    tiers = tier_guides(tier_set)
    points = chart_points(results)
    series = [charts.result_series(r, points=points[r.pk]) for r in charted]
    return {
        "model": model,
        "system": system,
        "figure": _figure(series, tiers, log=log) if series else None,
        "tables": {
            "results": results_table(
                results,
                [t for t, _ in tiers],
                points=points,
                title="Results over time",
                show_hardware=False,
                show_status=True,
            ),
            "points": _points_table(series),
        },
        "hidden_simulated": 0
        if include_simulated
        else Result.objects.filter(model=model, hardware=system, is_simulated=True).count(),
    }


def methodology_page() -> dict:
    sets = list(
        SloTierSet.objects.select_related("model")
        .prefetch_related(Prefetch("tiers", queryset=SloTier.objects.order_by("order")))
        .order_by("model__name", "-effective_date")
    )
    tables = {}
    for ts in sets:
        tables[ts.slug] = Table(
            ts.slug,
            f"{ts.name} v{ts.version}"
            + (f" — {ts.model.name}" if ts.model else " — project default"),
            [
                Column("tier", "Tier"),
                Column("min_p25_speed", "Min p25 output speed (tok/s per agent)", "float0"),
                Column("max_ttft", "Max TTFT (s)", "float1"),
                Column("ttft_percentile", "at TTFT percentile", "int"),
                Column("max_error_rate", "Max error rate", "pct"),
            ],
            [
                {
                    "tier": t.name,
                    "min_p25_speed": t.min_p25_output_speed,
                    "max_ttft": t.max_ttft_s,
                    "ttft_percentile": t.ttft_percentile,
                    "max_error_rate": t.max_error_rate,
                }
                for t in ts.tiers.all()
            ],
            caption=f"Effective {ts.effective_date}; source: {ts.source}",
        )
    return {
        "tier_tables": list(tables.items()),
        "tables": tables,
        "engine": engine_constants(),
    }
