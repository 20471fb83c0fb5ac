"""The checks of the prefix cache the server reported (docs/verification.md
"cache_honesty", docs/metrics.md "Cache truth"): no request reports more cached tokens than
its own agent session could have cached, and per trial the cached tokens against the most
the sessions' own prefixes allow and against the server's own counters."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentperf.engine import cachetruth
from agentperf.engine.cachetruth import PRIMED_TURN
from agentperf.engine.metrics import RequestRecord
from agentperf.engine.replay import NAMESPACE_TOKENS
from agentperf.engine.trajectory import Trajectory, common_prefix_length
from agentperf.verification import speculative
from agentperf.verification.checks import TrialData, result, server_deltas
from agentperf.verification.status import FAIL, PASS, WARN

# cache_honesty
CACHE_ALLOWANCE_TOKENS = 64
CACHE_ALLOWANCE_FRACTION = 0.05
CACHE_MAX_FLAGGED_FRACTION = 0.005


# ------------------------------------------------------------------------ cache honesty


class _TrajectoryPrompts:
    """Prompts and local message counts of one trajectory, built once."""

    def __init__(self, trajectory: Trajectory, count_tools: Any) -> None:
        self.prompts = list(trajectory.iter_prompts())
        self.counts = list(trajectory.iter_prompt_message_tokens())
        self.tools_tokens = [
            count_tools(trajectory.tools_for(k)) for k in range(len(trajectory.turns))
        ]

    def lcp_tokens(self, j: int, k: int) -> int:
        m = common_prefix_length(self.prompts[j], self.prompts[k])
        counts = self.counts[k]
        if m == 0 or counts is None:
            return 0
        return sum(counts[:m]) + NAMESPACE_TOKENS

    def total(self, k: int) -> int | None:
        counts = self.counts[k]
        return None if counts is None else sum(counts) + NAMESPACE_TOKENS + self.tools_tokens[k]


def _tools_counter() -> Any:
    from agentperf.engine.tokens import TokenCounter

    counter = TokenCounter()
    cache: dict[str, int] = {}

    def count(tools: Sequence[dict[str, Any]]) -> int:
        if not tools:
            return 0
        text = json.dumps(list(tools), sort_keys=True, separators=(",", ":"))
        if text not in cache:
            cache[text] = counter.count(text)
        return cache[text]

    return count


def honest_cache_bounds(
    trajectories: dict[str, Trajectory], trials: Sequence[TrialData]
) -> list[tuple[RequestRecord, float]]:
    """(record, the most cached tokens an honest server could report) for every record
    that reported cached tokens, in the order the requests were sent.

    An honest server can have cached, for a request, the longest prefix that this agent
    session sent before (its namespace line makes every session's prefix its own) plus a
    tools block rendered ahead of the messages; on a primed cache (virtual time), a session's
    first request also finds the turn the replay primed (``extra["primed_turn"]``). Sessions
    are keyed by trial, agent, session and trajectory: the search salts every trial's
    namespaces, so no session can find a prefix cached in another trial. Local token counts are scaled to the server's by the
    request's prompt_tokens / local total.
    """
    count_tools = _tools_counter()
    prompts: dict[str, _TrajectoryPrompts] = {}
    sent: dict[tuple[int, int, str, str], list[int]] = {}
    out: list[tuple[RequestRecord, float]] = []
    for t in sorted(trials, key=lambda t: t.index):
        for r in sorted(t.records or [], key=lambda r: r.t_send_ns):
            traj = trajectories.get(r.trajectory_id)
            if traj is None:
                continue
            tp = prompts.get(traj.id)
            if tp is None:
                tp = prompts[traj.id] = _TrajectoryPrompts(traj, count_tools)
            key = (t.index, r.agent_id, r.session_id, r.trajectory_id)
            earlier = sent.setdefault(key, [])
            primed = (r.extra or {}).get(PRIMED_TURN)
            if isinstance(primed, int) and not earlier:
                earlier.append(primed)  # the replay put that turn's prompt in the cache
            if r.n_cached is not None and r.n_in:
                bound_local = max((tp.lcp_tokens(j, r.turn_index) for j in earlier), default=0)
                bound_local += tp.tools_tokens[r.turn_index]
                total = tp.total(r.turn_index)
                scale = r.n_in / total if total else 1.0
                out.append((r, bound_local * scale))
            earlier.append(r.turn_index)
    return out


def _over_bound(
    bounds: Sequence[tuple[RequestRecord, float]],
) -> tuple[list[dict[str, Any]], float]:
    """The requests whose cached tokens exceed their honest bound by more than the
    allowance (docs/verification.md "cache_honesty"), and the excess tokens summed."""
    flagged = []
    excess_total = 0.0
    for r, bound in bounds:
        allowance = max(CACHE_ALLOWANCE_TOKENS, CACHE_ALLOWANCE_FRACTION * (r.n_in or 0))
        excess = (r.n_cached or 0) - bound
        if excess > allowance:
            excess_total += excess
            flagged.append(
                {
                    "request_id": r.request_id,
                    "agent": r.agent_id,
                    "session": r.session_id,
                    "turn": r.turn_index,
                    "n_in": r.n_in,
                    "cached": r.n_cached,
                    "honest_max": round(bound),
                }
            )
    return flagged, excess_total


def _honesty_verdict(
    flagged: int, checked: int, excess_total: float, server_rate: float | None
) -> tuple[str, str]:
    """Fail when more than the allowed share of requests (and at least two) exceed their
    bound: the server reuses cache across agents; any fewer only warn."""
    if flagged / checked > CACHE_MAX_FLAGGED_FRACTION and flagged >= 2:
        return FAIL, (
            f"{flagged} of {checked} requests reported more cached tokens than their "
            f"own session could have cached ({round(excess_total)} tokens too many): the "
            "server reuses cache across agents"
        )
    if flagged:
        return WARN, f"{flagged} of {checked} requests above the honest bound"
    return PASS, f"all {checked} requests within what their own session could have cached" + (
        f"; server prefix-cache hit rate {server_rate:.1%}" if server_rate else ""
    )


def check_cache_honesty(
    trajectories: dict[str, Trajectory] | None, trials: Sequence[TrialData]
) -> dict[str, Any]:
    """No request reports more cached tokens than its own session could have cached."""
    rule = (
        "per request: cached_tokens <= (longest prefix this agent session sent before + tools "
        f"block) + max({CACHE_ALLOWANCE_TOKENS} tokens, {CACHE_ALLOWANCE_FRACTION:.0%} of the "
        f"prompt); fail when over {CACHE_MAX_FLAGGED_FRACTION:.1%} of requests exceed it"
    )
    deltas = server_deltas(trials)
    server_rate = speculative.prefix_cache_hit_rate(deltas)
    ok = [r for t in trials for r in t.in_window() if r.ok]
    cached_known = [r for r in ok if r.n_cached is not None and r.n_in]
    client_rate = (
        sum(r.n_cached or 0 for r in cached_known) / sum(r.n_in or 0 for r in cached_known)
        if cached_known
        else None
    )
    evidence: dict[str, Any] = {
        "server_prefix_cache_hit_rate": server_rate,
        "reported_cache_hit_ratio": client_rate,
    }
    if trajectories is None or not any(t.records for t in trials):
        return result(
            "cache_honesty",
            WARN,
            "not measured: the dataset or raw records could not be read",
            rule,
            evidence,
        )
    bounds = honest_cache_bounds(trajectories, trials)
    if not bounds:
        return result(
            "cache_honesty",
            WARN,
            "not measured: the server reported no cached tokens",
            rule,
            evidence,
        )
    flagged, excess_total = _over_bound(bounds)
    frac = len(flagged) / len(bounds)
    evidence.update(
        requests_checked=len(bounds),
        over_bound=len(flagged),
        over_bound_fraction=frac,
        excess_cached_tokens=round(excess_total),
        honest_cached_tokens_max=round(sum(b for _, b in bounds)),
        reported_cached_tokens=sum(r.n_cached or 0 for r, _ in bounds),
        examples=flagged[:5],
    )
    status, summary = _honesty_verdict(len(flagged), len(bounds), excess_total, server_rate)
    return result("cache_honesty", status, summary, rule, evidence)


# -------------------------------------------------------------------------- cache truth


def trial_cache_truth(
    trajectories: dict[str, Trajectory] | None, trial: TrialData
) -> cachetruth.CacheTruth | None:
    """One trial's cache truth, judged with the server's counters at its window's edges:
    recomputed from the raw records and the dataset where both are here, else the one the
    runner stored in the trial's metrics; None when neither is."""
    scraped = (trial.telemetry or {}).get("server_metrics") or {}
    start, end = scraped.get("start"), scraped.get("end")
    w0, w1 = trial.metrics.get("window_start_ns"), trial.metrics.get("window_end_ns")
    if trajectories is not None and trial.records and w0 is not None and w1 is not None:
        truth = cachetruth.summarize_cache_truth(
            trial.records, trajectories, window_start_ns=w0, window_end_ns=w1
        )
    elif isinstance(trial.metrics.get("cache_truth"), dict):
        truth = cachetruth.CacheTruth.model_validate(trial.metrics["cache_truth"])
    else:
        return None
    return cachetruth.with_counters(
        truth,
        start if isinstance(start, dict) else None,
        end if isinstance(end, dict) else None,
    )


def check_cache_truth(
    trajectories: dict[str, Trajectory] | None, trials: Sequence[TrialData]
) -> dict[str, Any]:
    """Per trial, the cached tokens the server reported against the most its sessions' own
    prefixes allow, and against its own counters (docs/metrics.md "Cache truth")."""
    rule = (
        "per trial: observed cached tokens <= theoretical (each request's prefix shared with "
        f"its own session's earlier requests, server tokens) + {cachetruth.SLACK_TOKENS_PER_REQUEST}"
        f" tokens per request + {cachetruth.SLACK_FRACTION:.0%} of theoretical, else fail; "
        f"observed below {cachetruth.FLAG_RATIO:.0%} of theoretical is flagged; the counters' "
        f"hit share (Δhits / Δqueries) agrees with the requests' within "
        f"{cachetruth.CONSERVATION_TOLERANCE:.0%} + the window's edge share (prompt tokens in "
        "flight at an edge / the window's; requests above it fail)"
    )
    rows: list[dict[str, Any]] = []
    for t in sorted(trials, key=lambda t: t.index):
        truth = trial_cache_truth(trajectories, t)
        row: dict[str, Any] = {"trial": t.index, "concurrency": t.concurrency}
        if truth is None:
            row.update(verdict=cachetruth.NOT_CHECKED, reasons=["no records or dataset"])
        else:
            row.update(truth.to_dict())
        rows.append(row)
    verdicts = [r["verdict"] for r in rows]
    overall = cachetruth.worst_verdict(verdicts)
    theoretical = sum(r.get("theoretical_tokens") or 0 for r in rows)
    observed_rows = [r for r in rows if r.get("observed_tokens") is not None]
    observed = sum(r["observed_tokens"] for r in observed_rows) if observed_rows else None
    evidence: dict[str, Any] = {
        "verdict": overall,
        "theoretical_tokens": theoretical,
        "observed_tokens": observed,
        "ratio": observed / theoretical if observed is not None and theoretical else None,
        "tolerance": {
            "slack_tokens_per_request": cachetruth.SLACK_TOKENS_PER_REQUEST,
            "slack_fraction": cachetruth.SLACK_FRACTION,
            "flag_ratio": cachetruth.FLAG_RATIO,
            "conservation": cachetruth.CONSERVATION_TOLERANCE,
        },
        "trials": rows,
    }
    bad = [r for r in rows if r["verdict"] == cachetruth.FAIL]
    flagged = [r for r in rows if r["verdict"] == cachetruth.FLAGGED]
    if bad:
        status = FAIL
        first = bad[0]
        summary = (
            f"{len(bad)} of {len(rows)} trials fail: trial {first['trial']} (N={first['concurrency']}): "
            + "; ".join(first["reasons"][:2])
        )
    elif overall == cachetruth.NOT_CHECKED:
        status = WARN
        summary = "not measured: " + (
            rows[0]["reasons"][0] if rows and rows[0].get("reasons") else "no trials"
        )
    elif flagged:
        status = WARN
        first = flagged[0]
        summary = (
            f"{len(flagged)} of {len(rows)} trials flagged: trial {first['trial']} (N={first['concurrency']}): "
            + "; ".join(first["reasons"][:2])
        )
    else:
        status = PASS
        ratio = evidence["ratio"]
        summary = (
            f"observed {observed:,} of theoretical {theoretical:,} cached tokens"
            + (f" ({ratio:.0%})" if ratio is not None else "")
            + f" over {len(rows)} trials"
        )
        agreeing = sum(
            1 for r in rows if (r.get("counters") or {}).get("status") == cachetruth.AGREES
        )
        summary += (
            f"; counters agree in {agreeing} of {len(rows)}"
            if agreeing
            else "; counters not checked"
        )
    return result("cache_truth", status, summary, rule, evidence)
