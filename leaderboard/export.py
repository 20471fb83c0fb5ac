"""Public data dumps: every published result, its points and provenance, as a versioned
bundle (JSON + CSV) in artifact storage (`manage.py export_public`, linked from /data/).

A bundle lives under `public-exports/v<FORMAT_VERSION>/<UTC stamp>/`:

- `results.json`: `{"format", "format_version", "generated_at", "results": [...]}`, each
  result as the public read API's detail (`leaderboard.api.ResultDetailOut`: max agents
  and brackets per tier, points, energy, config, provenance, verification);
- `results.csv`: one row per result and tier (max agents, per accelerator, per MW, the
  result's cache truth);
- `points.csv`: one row per frontier point (trial) of every result, with its cache truth;
- `manifest.json`: the files with their sha256 and sizes, and the counts.

`public-exports/latest.json` names the newest bundle. Results of every status are kept
(superseded and invalidated ones with their status and reason, as the pages keep them);
simulated results are included and marked `is_simulated`.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
from typing import Any

from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages
from django.db.models import Prefetch
from django.utils import timezone

from agentperf import contract
from catalog.models import SloTier
from leaderboard.cost import CLASSES as COST_CLASSES
from leaderboard.cost import COST_COLUMNS
from leaderboard.cost import FIGURES as COST_FIGURES
from leaderboard.models import Result
from leaderboard.points import MeasuredEnergy, PublishedPoint

FORMAT = "agentperf-public-results"
FORMAT_VERSION = 1
PREFIX = "public-exports"
LATEST_KEY = f"{PREFIX}/latest.json"

RESULT_COLUMNS = (
    "result_id",
    "label",
    "status",
    "is_simulated",
    "model",
    "hardware",
    "tier",
    "max_agents",
    "highest_pass",
    "lowest_fail",
    "agents_per_accelerator",
    "agents_per_mw",
    "tokens_per_joule",
    "accelerators_used",
    "accelerators_in_system",
    "engine",
    "engine_version",
    "dataset_sha256",
    "published_at",
    "url",
    # simulated results only, MODELLED (leaderboard.energy): never measured
    "power_source",
    "modelled_agents_per_mw",
    "modelled_tokens_per_joule",
    # session SLOs at max agents (docs/engine.md "Session SLOs")
    "criterion",
    "sessions_met",
    "sessions",
    "session_share",
    "session_share_low",
    "session_share_high",
    "whole_task_model_time_median_s",
    "whole_task_model_time_p90_s",
    "whole_task_censored",
    # cost at max agents per price class, from the catalog when exported (leaderboard.cost)
    *COST_COLUMNS,
    "owned_power_source",
    # the result's cache truth, over all its trials (docs/metrics.md "Cache truth")
    "cache_theoretical_tokens",
    "cache_observed_tokens",
    "cache_ratio",
    "cache_verdict",
)
POINT_COLUMNS = (
    "result_id",
    "index",
    "phase",
    "concurrency",
    "p25_speed",
    "p25_speed_low",
    "p25_speed_high",
    "median_speed",
    "ttft_p75_s",
    "throughput_per_accelerator",
    "agents_per_accelerator",
    "error_rate",
    "cache_hit_ratio",
    "requests",
    "power_w",
    "power_tool",
    "power_coverage",
    "tokens_per_joule",
    "frontier",
    "is_simulated",
    "modelled_power_w",
    "modelled_tokens_per_joule",
    # the trial's cache truth (docs/metrics.md "Cache truth")
    "cache_theoretical_tokens",
    "cache_observed_tokens",
    "cache_ratio",
    "cache_verdict",
    "cache_counter_hit_share",
)


def _cost_cells(cost: dict, tier: str) -> dict[str, Any]:
    classes = ((cost.get("tiers") or {}).get(tier) or {}).get("classes") or {}
    cells = {
        f"{figure}_{kind.replace('-', '_')}": (classes.get(kind) or {}).get(figure)
        for kind in COST_CLASSES
        for figure in COST_FIGURES
    }
    cells["owned_power_source"] = (classes.get("owned") or {}).get("power_source")
    return cells


def _session_cells(sessions: dict, tier: str) -> dict[str, Any]:
    share = (sessions.get("tiers") or {}).get(tier) or {}
    task = share.get("whole_task_model_time_s") or {}
    return {
        "criterion": sessions.get("criterion"),
        "sessions_met": share.get("met"),
        "sessions": share.get("sessions"),
        "session_share": share.get("share"),
        "session_share_low": share.get("low"),
        "session_share_high": share.get("high"),
        "whole_task_model_time_median_s": task.get("median"),
        "whole_task_model_time_p90_s": task.get("p90"),
        "whole_task_censored": task.get("censored"),
    }


def _cache_cells(truth: dict | None) -> dict[str, Any]:
    """A result's cache truth over its trials (leaderboard.cachetruth)."""
    truth = truth or {}
    return {
        "cache_theoretical_tokens": truth.get("theoretical_tokens"),
        "cache_observed_tokens": truth.get("observed_tokens"),
        "cache_ratio": truth.get("ratio"),
        "cache_verdict": truth.get("verdict"),
    }


def _point_cache_cells(truth: contract.CacheTruth | None) -> dict[str, Any]:
    """A trial's cache truth as its point stored it (PublishedPoint.cache_truth)."""
    if truth is None:
        return dict.fromkeys(
            ("cache_theoretical_tokens", "cache_observed_tokens", "cache_ratio", "cache_verdict")
        ) | {"cache_counter_hit_share": None}
    return {
        "cache_theoretical_tokens": truth.theoretical_tokens,
        "cache_observed_tokens": truth.observed_tokens,
        "cache_ratio": truth.ratio,
        "cache_verdict": truth.verdict,
        "cache_counter_hit_share": truth.counters.hit_share if truth.counters else None,
    }


def _results():
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
        )
        .order_by("pk")
    )


def _json_default(value: Any) -> str:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _csv(columns: tuple[str, ...], rows: list[dict[str, Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row.get(k) is None else row.get(k) for k in columns})
    return out.getvalue().encode()


def result_rows(result: Result, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """``results.csv``: one row per tier of ``result``; ``doc`` is its API detail (the
    energy, sessions, cost and cache truth derived when read)."""
    energy = (doc.get("energy") or {}).get("tiers") or {}
    modelled = result.modelled.tiers if result.modelled else {}
    rows = []
    for tier in result.tier_set.tiers.all():
        bracket = result.tier_brackets.get(tier.name)
        at = modelled.get(tier.name)
        rows.append(
            {
                "result_id": result.pk,
                "label": result.label,
                "status": result.status,
                "is_simulated": result.is_simulated,
                "model": result.model.slug,
                "hardware": result.hardware.slug,
                "tier": tier.name,
                "max_agents": (result.max_agents or {}).get(tier.name),
                "highest_pass": bracket.highest_pass if bracket else None,
                "lowest_fail": bracket.lowest_fail if bracket else None,
                "agents_per_accelerator": (result.agents_per_accelerator or {}).get(tier.name),
                "agents_per_mw": (result.agents_per_mw or {}).get(tier.name),
                "tokens_per_joule": (energy.get(tier.name) or {}).get("tokens_per_joule"),
                "accelerators_used": result.accelerators_used,
                "accelerators_in_system": result.accelerators_in_system,
                "engine": result.engine_name,
                "engine_version": result.engine_version,
                "dataset_sha256": result.dataset_sha256,
                "published_at": result.published_at.isoformat(),
                "url": doc.get("url"),
                "power_source": doc.get("power_source"),
                "modelled_agents_per_mw": at.agents_per_mw if at else None,
                "modelled_tokens_per_joule": at.tokens_per_joule if at else None,
                **_session_cells(doc.get("sessions") or {}, tier.name),
                **_cost_cells(doc.get("cost") or {}, tier.name),
                **_cache_cells(doc.get("cache_truth")),
            }
        )
    return rows


POINT_FIELDS = set(POINT_COLUMNS) & set(PublishedPoint.model_fields)


def point_rows(result: Result) -> list[dict[str, Any]]:
    """``points.csv``: one row per published point (trial) of ``result``."""
    rows = []
    for p in result.published_points:
        low, high = p.interval("p25_speed")
        energy = p.energy if isinstance(p.energy, MeasuredEnergy) else None
        modelled = p.modelled_energy
        rows.append(
            {
                **p.model_dump(include=POINT_FIELDS),
                "result_id": result.pk,
                "p25_speed_low": low,
                "p25_speed_high": high,
                "power_tool": energy.tool if energy else None,
                "power_coverage": energy.coverage if energy else None,
                "tokens_per_joule": energy.tokens_per_joule if energy else None,
                "is_simulated": result.is_simulated,
                "modelled_power_w": modelled.power_w if modelled else None,
                "modelled_tokens_per_joule": modelled.tokens_per_joule if modelled else None,
                **_point_cache_cells(p.cache_truth),
            }
        )
    return rows


def bundle_files(*, now: dt.datetime) -> tuple[dict[str, bytes], dict[str, int]]:
    """The bundle's files (name → bytes) and its counts, from the database."""
    from leaderboard.api import ResultDetailOut

    documents, results, points = [], [], []
    for result in _results():
        doc = ResultDetailOut(result).data
        documents.append(doc)
        results += result_rows(result, doc)
        points += point_rows(result)
    header = {"format": FORMAT, "format_version": FORMAT_VERSION, "generated_at": now.isoformat()}
    files = {
        "results.json": json.dumps(
            {**header, "results": documents}, default=_json_default, indent=1, sort_keys=True
        ).encode(),
        "results.csv": _csv(RESULT_COLUMNS, results),
        "points.csv": _csv(POINT_COLUMNS, points),
    }
    counts = {"results": len(documents), "result_tier_rows": len(results), "points": len(points)}
    return files, counts


def export_public(*, storage: Storage | None = None, now: dt.datetime | None = None) -> dict:
    """Write a new bundle and point `latest.json` at it; returns the manifest."""
    storage = storage or storages["artifacts"]
    now = now or timezone.now()
    files, counts = bundle_files(now=now)
    folder = f"{PREFIX}/v{FORMAT_VERSION}/{now:%Y%m%dT%H%M%S%fZ}"
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "generated_at": now.isoformat(),
        "folder": folder,
        "counts": counts,
        "files": [],
    }
    for name, content in files.items():
        key = f"{folder}/{name}"
        storage.save(key, ContentFile(content))
        manifest["files"].append(
            {
                "name": name,
                "key": key,
                "size": len(content),
                "sha256": hashlib.sha256(content).hexdigest(),
            }
        )
    body = json.dumps(manifest, indent=1, sort_keys=True).encode()
    storage.save(f"{folder}/manifest.json", ContentFile(body))
    if storage.exists(LATEST_KEY):
        storage.delete(LATEST_KEY)
    storage.save(LATEST_KEY, ContentFile(body))
    from leaderboard.purge import purge_on_commit

    purge_on_commit(["dump"])  # the data page and its file links (docs/caching.md)
    return manifest


def latest_manifest(storage: Storage | None = None) -> dict | None:
    """The newest bundle's manifest, or None before the first export."""
    storage = storage or storages["artifacts"]
    if not storage.exists(LATEST_KEY):
        return None
    with storage.open(LATEST_KEY, "rb") as handle:
        return json.loads(handle.read())
