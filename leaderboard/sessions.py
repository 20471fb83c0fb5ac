"""Session SLOs of a published result (docs/engine.md "Session SLOs"), read from its stored
points: per tier at its max agents, the share of sessions that met the tier with its
session-bootstrap interval, and the whole-task model time there (median, p90)."""

from __future__ import annotations

from typing import Any


def _point_at(points: list[dict], n: int | None) -> dict | None:
    if not n:
        return None
    at = [p for p in points if p.get("concurrency") == n]
    return at[-1] if at else None


def result_sessions(result: Any) -> dict:
    """{"criterion", "min_session_share", "tiers": {tier: {"max_agents", "met", "sessions",
    "share", "low", "high", "confidence", "whole_task_model_time_s"}}}; a tier whose point
    has no session block (a trial stored before them) is left out."""
    tier_set = result.tier_set
    points = list(result.points or [])
    tiers: dict[str, dict] = {}
    for name, n in (result.max_agents or {}).items():
        point = _point_at(points, n)
        block = point.get("sessions") if point else None
        if not isinstance(block, dict):
            continue
        share = (block.get("tiers") or {}).get(name)
        if not isinstance(share, dict):
            continue
        tiers[name] = {
            "max_agents": n,
            **share,
            "whole_task_model_time_s": block.get("whole_task_model_time_s"),
        }
    return {
        "criterion": getattr(tier_set, "criterion", "requests"),
        "min_session_share": getattr(tier_set, "min_session_share", None),
        "tiers": tiers,
    }
