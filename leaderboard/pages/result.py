"""A result's page: its frontier, tiers, trials, load generator, energy, loops, sessions,
cost, verification, configuration, raw data and the command that reproduces it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db.models import Prefetch
from django.urls import NoReverseMatch, reverse

from agentperf import contract
from catalog.models import SloTier
from leaderboard import charts, configview, receipts
from leaderboard.cachetruth import result_cache_truth
from leaderboard.cost import CLASS_LABELS, CLASSES, result_cost
from leaderboard.energy import MODELLED, power_source, result_energy
from leaderboard.engine_metrics import engine_metrics_figure, engine_metrics_table
from leaderboard.launch import result_launch
from leaderboard.loadgen import load_generator_table
from leaderboard.loops import loops_table
from leaderboard.models import Result
from leaderboard.pages.common import (
    FLAG_TEXT,
    bracket_text,
    criterion_text,
    loops_json,
    page_figure,
    points_table,
)
from leaderboard.points import point_at
from leaderboard.reproduce import reproduce_command
from leaderboard.tables import Column, Table
from runs.models import Trial
from submissions.models import Artifact
from submissions.stored_config import read_published_config

# The result page's chart is sized so that the title, the verdict and the whole plot fit a
# 1366×768 screen (issue 35; tests/leaderboard/test_browser_fold.py).
RESULT_CHART_HEIGHT = 400


def _raw_data_links(result: Result, artifacts: list[Artifact]) -> list[dict]:
    links = []
    for a in artifacts:
        try:
            url = reverse("result-raw-data", args=[result.pk, a.pk])
        except NoReverseMatch:  # pragma: no cover - the URL is part of this app
            continue
        links.append({"url": url, "key": a.storage_key, "size": a.size, "sha256": a.sha256})
    return links


def trials_table(result: Result, trials: Iterable[Trial], tier_names: Sequence[str]) -> Table:
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
    points = {p.index: p for p in result.published_points}
    if result.modelled:
        columns.append(Column("modelled_power_w", "Power (W, modelled)", "float0", "—"))
    columns += [Column(f"tier:{t}", t, "text", "—") for t in tier_names]
    columns.append(Column("simulated", "Simulated", "bool"))
    rows = []
    for t in trials:
        m = t.summary
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
            "power_w": point.power_w if (point := points.get(t.index)) else None,
            "modelled_power_w": (
                point.modelled_energy.power_w if point and point.modelled_energy else None
            ),
            "simulated": result.is_simulated,
        }
        verdicts = t.tier_verdicts
        for name in tier_names:
            verdict = verdicts.get(name)
            row[f"tier:{name}"] = (
                None if verdict is None else ("pass" if verdict.passed else "fail")
            )
        rows.append(row)
    return Table("trials", "Trials", columns, rows)


def failed_requests_table(trials: Iterable[Trial]) -> Table:
    """Per trial with failed requests: its top error reasons with counts and one detail as
    the server gave it (docs/engine.md "Error reasons"); a trial stored before reasons were
    summarised shows its counts per class."""
    columns = [
        Column("index", "Trial", "int"),
        Column("concurrency", "Concurrency", "int"),
        Column("requests", "Requests in window", "int"),
        Column("failed", "Failed", "int"),
        Column("error_class", "Class"),
        Column("count", "With this reason", "int"),
        Column("reason", "Reason (one example)", "text", "not recorded"),
    ]
    rows = []
    for t in trials:
        m = t.summary
        if not m.failed:
            continue
        trial = {
            "index": t.index,
            "concurrency": t.concurrency,
            "requests": m.requests,
            "failed": m.failed,
        }
        reasons = [(r.count, r.error_class, r.example) for r in m.error_reasons]
        if not reasons:
            reasons = [(n, name, None) for name, n in m.errors_by_class.items()]
        elif (other := m.failed - sum(r.count for r in m.error_reasons)) > 0:
            reasons.append((other, "", "other reasons"))
        for count, error_class, reason in reasons:
            rows.append({**trial, "count": count, "error_class": error_class, "reason": reason})
    return Table(
        "failed_requests",
        "Failed requests",
        columns,
        rows,
        caption="The most frequent reasons each trial's failed requests gave, counted over the "
        "requests sent in its window; details that differ only in their numbers count as one "
        "reason.",
    )


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
        Column("criterion", "Criterion"),
        Column("sessions_met", "Sessions that met it, at max agents", "text", "not summarised"),
    ]
    criterion = criterion_text(result.tier_set)
    modelled = result.modelled.tiers if result.is_simulated and result.modelled else {}
    if result.is_simulated and result.modelled:
        columns.append(Column("modelled_agents_per_mw", "Agents / MW (modelled)", "float0", "—"))
    columns += [
        Column("flags", "Flags"),
        Column("simulated", "Simulated", "bool"),
    ]
    searched = result.run.summary.tiers if result.run.summary else {}
    rows = []
    for t in tiers:
        bracket = result.tier_brackets.get(t.name)
        found = searched.get(t.name)
        flags = (bracket.flags if bracket else []) or (found.flags if found else [])
        at = modelled.get(t.name)
        rows.append(
            {
                "highest_pass": bracket.highest_pass if bracket else None,
                "lowest_fail": bracket.lowest_fail if bracket else None,
                "confirmed": bracket.confirmed if bracket else None,
                "marginal": bracket.marginal if bracket else None,
                "tier": t.name,
                "min_p25_speed": t.min_p25_output_speed,
                "max_ttft": t.max_ttft_s,
                "ttft_percentile": t.ttft_percentile,
                "max_error_rate": t.max_error_rate,
                "max_agents": result.max_agents.get(t.name),
                "agents_per_accelerator": result.agents_per_accelerator.get(t.name),
                "agents_per_mw": (result.agents_per_mw or {}).get(t.name),
                "modelled_agents_per_mw": at.agents_per_mw if at else None,
                "flags": ", ".join(FLAG_TEXT.get(f, f) for f in flags) or None,
                "simulated": result.is_simulated,
                "criterion": criterion,
                "sessions_met": session_share_text(
                    _point_sessions(result, result.max_agents.get(t.name)), t.name
                ),
                "_class": "marginal" if bracket and bracket.marginal else "",
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


def _point_sessions(result: Result, n: int | None) -> contract.SessionMetrics | None:
    """The session block of the (last) point at concurrency ``n``; None when none."""
    point = point_at(result.published_points, n)
    return point.sessions if point is not None else None


def session_share_text(block: contract.SessionMetrics | None, tier: str) -> str | None:
    """ "19 of 20 (95%; 95% CI 85–100%)", or None when the trial has no session block."""
    share = block.tiers.get(tier) if block is not None else None
    if share is None or share.share is None:
        return None
    text = f"{share.met} of {share.sessions} ({share.share:.0%}"
    if share.low is not None and share.high is not None:
        text += f"; {share.confidence:.0%} CI {share.low:.0%}–{share.high:.0%}"
    return text + ")"


def sessions_table(result: Result, tier_names: Sequence[str]) -> Table:
    """Per trial: its sessions, the share that met each tier (session-bootstrap interval)
    beside the request-level verdict, and the whole-task model time (docs/engine.md
    "Session SLOs"); empty when no point has a session block."""
    columns = [
        Column("index", "Trial", "int"),
        Column("concurrency", "Agents (N)", "int"),
        Column("sessions", "Sessions in window", "int"),
        Column("task_sessions", "Whole tasks (ended)", "int"),
        Column("task_censored", "Tasks still running at the end (censored)", "int", "not counted"),
        Column(
            "task_median_s",
            "Whole-task model time, median (s, Kaplan–Meier)",
            "float1",
            "not reached",
        ),
        Column(
            "task_p90_s", "Whole-task model time, p90 (s, Kaplan–Meier)", "float1", "not reached"
        ),
    ]
    for name in tier_names:
        columns.append(Column(f"share:{name}", f"{name}: sessions met", "text", "—"))
        columns.append(Column(f"requests:{name}", f"{name}: request-level verdict"))
    rows = []
    for p in sorted(result.published_points, key=lambda p: p.index):
        block = p.sessions
        if block is None:
            continue
        task = block.whole_task_model_time_s
        row = {
            "index": p.index,
            "concurrency": p.concurrency,
            "sessions": block.sessions,
            "task_sessions": task.sessions,
            # a trial stored before censoring was counted says nothing of it
            "task_censored": task.censored if "censored" in task.model_fields_set else None,
            "task_median_s": task.median,
            "task_p90_s": task.p90,
        }
        for name in tier_names:
            row[f"share:{name}"] = session_share_text(block, name)
            v = p.passed(name)
            row[f"requests:{name}"] = None if v is None else ("pass" if v else "fail")
        rows.append(row)
    return Table(
        "sessions",
        "Sessions: what each agent's user felt",
        columns,
        rows,
        caption="A session (one agent's trajectory) meets a tier when its own p25 output "
        "speed and its own TTFT percentile meet the tier, over its requests sent in the "
        "window; the interval resamples sessions. Whole-task model time: the model time of "
        "a whole trajectory, tool delays excluded; a task still running when the trial "
        "stopped is censored (it took at least its time so far), and the median and p90 are "
        "Kaplan–Meier estimates over ended and censored tasks, so long tasks are not left "
        'out (docs/metrics.md "Whole-task time"). The verdict column is the tier set\'s '
        "own criterion.",
    )


def cost_table(result: Result, cost: dict) -> Table:
    """$ per million output tokens, per million total tokens and per agent-hour at each
    tier's max agents, per price class (leaderboard.cost); "—" where a price or the power
    an owned system needs is unknown."""
    columns = [
        Column("tier", "Tier"),
        Column("max_agents", "Max agents", "int"),
        Column("class", "Price class"),
        Column("usd_per_m_output_tokens", "$ / M output tokens", "float3"),
        Column("usd_per_m_total_tokens", "$ / M total tokens", "float3"),
        Column("usd_per_agent_hour", "$ / agent-hour", "float3"),
        Column("usd_per_hour", "$ / hour (deployment)", "float2"),
        Column("power", "Power (owned)"),
        Column("price", "Price (date, source)"),
    ]
    prices = cost.get("prices") or {}
    rows = []
    for name, t in (cost.get("tiers") or {}).items():
        for kind in CLASSES:
            c = t["classes"][kind]
            price = prices.get(kind)
            power = None
            if c.get("power_source"):
                power = f"{c['power_w']:,.0f} W ({c['power_source']})"
            rows.append(
                {
                    "tier": name,
                    "max_agents": t["max_agents"],
                    "class": CLASS_LABELS.get(kind, kind),
                    "usd_per_m_output_tokens": c["usd_per_m_output_tokens"],
                    "usd_per_m_total_tokens": c["usd_per_m_total_tokens"],
                    "usd_per_agent_hour": c["usd_per_agent_hour"],
                    "usd_per_hour": c["usd_per_hour"],
                    "power": power,
                    "price": f"{price['date']}, {price['source'] or 'no source'}"
                    if price
                    else "no price in the catalog",
                }
            )
    label = "modelled" if result.is_simulated else "measured"
    return Table(
        "cost",
        "Cost at max agents",
        columns,
        rows,
        caption="From the catalog's prices for this system, read now (docs/catalog.md "
        '"Prices"): rental classes are $ per accelerator-hour × accelerators used; owned is '
        "capex ÷ 3 years plus power × PUE × $/kWh, with this result's "
        f'{label} power. "—": the catalog has no such price, or no power was {label}.',
    )


def timeline_trials(trials: Iterable[Trial]) -> list[dict]:
    """The trial picker of the session timeline (templates/leaderboard/_timeline.html)."""
    return sorted(
        (
            {
                "index": t.index,
                "concurrency": t.concurrency,
                "phase": t.phase,
                "records": bool(t.raw_records_key),
            }
            for t in trials
        ),
        key=lambda t: t["index"],
    )


def cache_truth_table(truth: dict | None) -> Table:
    """Each trial's cache truth (docs/metrics.md "Cache truth"): the reuse its dataset made
    possible against what the server reported, and the verdict."""
    columns = [
        Column("trial", "Trial", "int"),
        Column("agents", "Agents", "int"),
        Column("theoretical", "Reusable prefix (tokens)", "int"),
        Column("observed", "Reported cached (tokens)", "int", "not reported"),
        Column("ratio", "Observed / reusable", "pct", "—"),
        Column("counters", "Server counters"),
        Column("verdict", "Verdict"),
    ]
    rows = [
        {
            "trial": t["index"] + 1,
            "agents": t["concurrency"],
            "theoretical": t["theoretical_tokens"],
            "observed": t["observed_tokens"],
            "ratio": t["ratio"],
            "counters": (t["counters"] or "not scraped").replace("_", " "),
            "verdict": str(t["verdict"]).replace("_", " "),
        }
        for t in (truth or {}).get("trials") or []
    ]
    return Table("cache-truth", "Cache truth per trial", columns, rows)


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
    tiers = result.modelled.tiers if result.is_simulated and result.modelled else {}
    rows = [
        {
            "tier": name,
            "max_agents": t.max_agents,
            "power_w": t.power_w,
            "power_w_per_accelerator": t.power_w / result.accelerators_used,
            "agents_per_mw": t.agents_per_mw,
            "tokens_per_joule": t.tokens_per_joule,
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


def verdict(result: Result, tiers: Sequence[SloTier]) -> list[dict]:
    """The page's one-line answer: per tier, max agents with its bracket and flags, and a bar
    as wide as its share of the best tier's figure (the strip above the chart)."""
    best = max([result.max_agents.get(t.name) or 0 for t in tiers] + [1])
    strip = []
    for t in tiers:
        agents = result.max_agents.get(t.name)
        bracket = result.tier_brackets.get(t.name)
        strip.append(
            {
                "tier": t.name,
                "speed": t.min_p25_output_speed,
                "agents": agents,
                # pages.common's cell text reads the stored form
                "bracket": bracket_text(bracket),
                "marginal": bool(bracket and bracket.marginal),
                "percent": round(100 * (agents or 0) / best),
            }
        )
    return strip


def _page_result(pk: int) -> Result | None:
    """The result with everything its page reads, in a fixed number of queries."""
    return (
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
            "hardware__prices",
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


def _tables(
    result: Result, tiers: Sequence[SloTier], series: list[dict], figures: dict
) -> dict[str, Table]:
    """The page's tables; ``figures`` holds what the page shows beside them (energy, cost,
    loops, cache truth), computed once."""
    trials = result.run.trials.all()
    tier_names = [t.name for t in tiers]
    return {
        "tiers": tiers_table(result, tiers),
        "trials": trials_table(result, trials, tier_names),
        "failed_requests": failed_requests_table(trials),
        "load_generator": load_generator_table(trials),
        "energy": energy_table(result, figures["energy"]),
        "modelled_energy": modelled_energy_table(result),
        "loops": figures["loops"],
        "sessions": sessions_table(result, tier_names),
        "cost": cost_table(result, figures["cost"]),
        "points": points_table(series),
        "engine_metrics": engine_metrics_table(trials),
        "cache_truth": cache_truth_table(figures["cache_truth"]),
    }


def result_page(*, pk: int) -> dict | None:
    result = _page_result(pk)
    if result is None:
        return None
    run = result.run
    tiers = list(result.tier_set.tiers.all())
    guides = [(t.name, t.min_p25_output_speed) for t in tiers]
    series = [charts.result_series(result, band=result.twin_band)]
    # a missing reverse one-to-one raises RelatedObjectDoesNotExist, an AttributeError
    verification = getattr(run, "verification", None)
    config = configview.public_config(result) or {}  # docs/security.md "Secrets in configs"
    roles = configview.roles(read_published_config(config))
    figures = {
        "energy": result_energy(result),
        "cost": result_cost(result),
        "loops": loops_table(result, run.trials.all(), [t.name for t in tiers]),
        "cache_truth": result_cache_truth(result),
    }
    engine_figure = engine_metrics_figure(run.trials.all())
    return {
        "result": result,
        "submission": result.submission,
        "run": run,
        "figure": page_figure(series, guides, log=False, height=RESULT_CHART_HEIGHT),
        "verdict": verdict(result, tiers),
        "tables": _tables(result, tiers, series, figures),
        "engine_metrics_figure": charts.figure_json(engine_figure) if engine_figure else None,
        "cache_truth": figures["cache_truth"],
        "loops_figure": loops_json(figures["loops"]),
        "band": result.twin_band,  # simulated only: open parameters (docs/simulator.md "Bands")
        "verification": verification,
        "checks": verification.results if verification else [],
        "config_groups": configview.grouped(config),
        "config_withheld": configview.config_withheld(result),
        "roles": roles,
        "roles_total": sum(r.accelerators or 0 for r in roles),
        "raw_data": _raw_data_links(result, run.raw_artifacts),
        "search_flags": run.summary.flags if run.summary else [],
        "timeline_trials": timeline_trials(run.trials.all()),
        "timeline_base": f"/api/v1/public/results/{result.pk}/trials/",
        "timeline_suffix": "/timeline/",
        "reproduce": reproduce_command(run.spec),
        "power_measured": result.agents_per_mw is not None,
        "energy": figures["energy"],
        "power_source": power_source(result),
        "modelled": result.modelled if result.is_simulated else None,
        "cost": figures["cost"],
        # the signed receipt's key id and subjects (leaderboard.receipts)
        "receipt": receipts.summary(result),
        "launch": result_launch(result),  # was the image run (leaderboard.launch)
    }
