"""A result's cache truth: its trials' theoretical and observed cached tokens summed, the
ratio and the worst verdict (docs/metrics.md "Cache truth").

Each published point carries its trial's cache truth as the worker stored it (the engine's
``CacheTruth`` with the window's counters, ``PublishedPoint.cache_truth``); the result's
figure is derived from those points when it is read, like every derived figure
(docs/metrics.md), so it needs no column of its own.
"""

from __future__ import annotations

from typing import Any

from agentperf.engine import cachetruth
from leaderboard.models import Result


def result_cache_truth(result: Result) -> dict[str, Any] | None:
    """{theoretical_tokens, observed_tokens, prompt_tokens, ratio, verdict, trials: [...]}
    over the result's points; None for a result published before cache truth was
    summarised (no point carries it)."""
    rows: list[dict[str, Any]] = []
    theoretical = prompt = 0
    observed: int | None = None
    for point in result.published_points:
        truth = point.cache_truth
        if truth is None:
            continue
        counters = truth.counters
        rows.append(
            {
                "index": point.index,
                "concurrency": point.concurrency,
                "theoretical_tokens": truth.theoretical_tokens,
                "observed_tokens": truth.observed_tokens,
                "ratio": truth.ratio,
                "verdict": truth.verdict,
                "counters": counters.status if counters is not None else None,
                "counter_hit_share": counters.hit_share if counters is not None else None,
            }
        )
        theoretical += truth.theoretical_tokens
        prompt += truth.prompt_tokens
        if truth.observed_tokens is not None:
            observed = (observed or 0) + truth.observed_tokens
    if not rows:
        return None
    return {
        "theoretical_tokens": theoretical,
        "observed_tokens": observed,
        "prompt_tokens": prompt,
        "ratio": observed / theoretical if observed is not None and theoretical else None,
        "verdict": cachetruth.worst_verdict([str(r["verdict"]) for r in rows]),
        "trials": rows,
    }
