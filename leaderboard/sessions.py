"""Session SLOs of a published result (docs/engine.md "Session SLOs"), read from its stored
points: per tier at its max agents, the share of sessions that met the tier with its
session-bootstrap interval, and the whole-task model time there (median, p90)."""

from __future__ import annotations

from typing import Any

from leaderboard.points import point_at


def result_sessions(result: Any) -> dict[str, Any]:
    """{"criterion", "min_session_share", "tiers": {tier: {"max_agents", "met", "sessions",
    "share", "low", "high", "confidence", "whole_task_model_time_s"}}}; a tier whose point
    has no session block (a trial stored before them) is left out."""
    tier_set = result.tier_set
    points = result.published_points
    tiers: dict[str, dict[str, Any]] = {}
    for name, n in (result.max_agents or {}).items():
        point = point_at(points, n)
        block = point.sessions if point is not None else None
        share = block.tiers.get(name) if block is not None else None
        if block is None or share is None:
            continue
        tiers[name] = {
            "max_agents": n,
            **share.dump(),
            "whole_task_model_time_s": block.whole_task_model_time_s.dump(),
        }
    return {
        "criterion": getattr(tier_set, "criterion", "requests"),
        "min_session_share": getattr(tier_set, "min_session_share", None),
        "tiers": tiers,
    }
