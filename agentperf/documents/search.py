"""A run's search summary (``BenchmarkRun.search_summary``, docs/engine.md): the engine's
SearchResult without each trial's data, per tier the most agents that met it, and the
open-loop search's summary when the run had one (docs/engine.md "Arrival modes")."""

from __future__ import annotations

from typing import Any, Literal

from agentperf.documents.rules import Complete, Contract, Count, Positive
from agentperf.engine.search import Phase, SearchResult
from agentperf.engine.search import TierResult as EngineTierResult

SearchPhase = Phase  # the engine's (agentperf/engine/search.py)


class TierResult(Complete, EngineTierResult):
    """One tier's search result: the engine's own model (agentperf.engine.search.TierResult),
    under the contract's rules."""

    model_config = Contract.model_config


class SummaryTrial(Contract):
    """A trial as the search saw it, without its data (stored on the Trial row)."""

    index: Count
    concurrency: Positive
    phase: SearchPhase
    verdicts: dict[str, bool]
    marginal: list[str]


class OpenLoopTier(Contract):
    """One tier of the open-loop search (agentperf.engine.openloop.open_loop_summary)."""

    max_rate_per_min: float  # 0: even the first rate failed
    lowest_fail_rate_per_min: float | None
    confirmed: bool
    converged: bool
    flags: list[str]
    # concurrent sessions the trials at the max rate produced (None: no passing rate)
    mean_concurrent_sessions: float | None
    peak_concurrent_sessions: Count | None
    ttft_s: dict[str, float | None]  # TTFT percentiles at the max rate ("p50".."p99")


class OpenLoopSummary(Contract):
    """``SearchSummary.open_loop``: the open-loop search run beside the closed one over the
    same dataset (docs/engine.md "Arrival modes")."""

    mode: Literal["open"]
    rate_step_per_min: float
    rate_cap_per_min: float
    flags: list[str]
    trials: Count
    tiers: dict[str, OpenLoopTier]


class SearchSummary(Contract):
    """``BenchmarkRun.search_summary``: SearchResult.to_dict() without each trial's data
    (docs/engine.md), and the open-loop search's summary when the run had one."""

    cap: Positive
    flags: list[str]
    max_agents: dict[str, int]
    tiers: dict[str, TierResult]
    trials: list[SummaryTrial]
    open_loop: OpenLoopSummary | None = None

    @classmethod
    def of(cls, result: SearchResult, open_loop: dict[str, Any] | None = None) -> SearchSummary:
        """From the engine's result and its open-loop summary (``open_loop_summary``)."""
        doc = result.to_dict()
        doc["trials"] = [{k: v for k, v in t.items() if k != "data"} for t in doc["trials"]]
        if open_loop is not None:
            doc["open_loop"] = open_loop
        return cls.model_validate(doc)


def search_summary(stored: Any) -> SearchSummary | None:
    """``BenchmarkRun.search_summary`` read back through the contract; None for a run that
    has not completed (``{}``)."""
    return SearchSummary.model_validate(stored) if stored else None
