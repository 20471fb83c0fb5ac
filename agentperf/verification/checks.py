"""The verification checks beyond the basic ones, as pure functions of plain data.

Each returns ``{"name", "status": pass|warn|fail, "summary", "rule", "evidence"}``. They
take trials (``TrialData``: what a Trial row holds, plus its raw records), the dataset's
trajectories, the config and the qualification probes — never the database — so the same
functions judge a run stored by the pipeline and a run made in a test on virtual time.
docs/verification.md states every rule and tolerance.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentperf.engine import cachetruth
from agentperf.engine.cachetruth import PRIMED_TURN
from agentperf.engine.metrics import RequestRecord
from agentperf.engine.replay import NAMESPACE_TOKENS
from agentperf.engine.trajectory import Trajectory, common_prefix_length
from agentperf.verification import quality, speculative, taskcheck
from agentperf.verification.fingerprint import compare_canaries
from agentperf.verification.status import FAIL, PASS, WARN, worst_status

# token_counts
OUTPUT_RATIO_TOLERANCE = 0.15
PROMPT_RATIO_BOUNDS = (0.5, 2.0)
# cache_honesty
CACHE_ALLOWANCE_TOKENS = 64
CACHE_ALLOWANCE_FRACTION = 0.05
CACHE_MAX_FLAGGED_FRACTION = 0.005
# repeatability
SPEED_TOLERANCE = 0.10
TTFT_TOLERANCE = 0.20
TTFT_TOLERANCE_ABS_S = 0.05
# telemetry (power)
POWER_MIN_COVERAGE = 0.95
POWER_MAX_GAP_S = 3.0


def result(
    name: str, status: str, summary: str, rule: str, evidence: dict[str, Any]
) -> dict[str, Any]:
    return {"name": name, "status": status, "summary": summary, "rule": rule, "evidence": evidence}


@dataclass(slots=True)
class TrialData:
    """One trial as verification sees it (a Trial row and, when loaded, its raw records)."""

    index: int
    concurrency: int
    phase: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    verdicts: dict[str, Any] = field(default_factory=dict)
    telemetry: dict[str, Any] = field(default_factory=dict)
    records: list[RequestRecord] | None = None
    raw_records_key: str = ""
    raw_records_count: int = 0

    def in_window(self) -> list[RequestRecord]:
        w0, w1 = self.metrics.get("window_start_ns"), self.metrics.get("window_end_ns")
        records = self.records or []
        if w0 is None or w1 is None:
            return list(records)
        return [r for r in records if w0 <= r.t_send_ns < w1]


# ------------------------------------------------------------------------- token counts


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def check_token_counts(
    trials: Sequence[TrialData],
    *,
    expected_output_ratio: float | None = None,
    tolerance: float = OUTPUT_RATIO_TOLERANCE,
) -> dict[str, Any]:
    """Server token counts against the local offline count (output and prompt)."""
    rows: list[dict[str, Any]] = []
    for t in trials:
        ok = [r for r in t.in_window() if r.ok]
        with_out = [r for r in ok if r.n_out is not None and r.local_output_tokens]
        with_in = [r for r in ok if r.n_in and r.local_prompt_tokens]
        out_ratio = _ratio(
            sum(r.n_out or 0 for r in with_out), sum(r.local_output_tokens or 0 for r in with_out)
        )
        in_ratio = _ratio(
            sum(r.n_in or 0 for r in with_in), sum(r.local_prompt_tokens or 0 for r in with_in)
        )
        rows.append(
            {
                "trial": t.index,
                "concurrency": t.concurrency,
                "requests": len(with_out),
                "output_ratio": out_ratio,
                "prompt_ratio": in_ratio,
            }
        )
    measured = [r for r in rows if r["output_ratio"] is not None]
    rule = (
        f"per trial, Σ completion_tokens / Σ local output tokens within ±{tolerance:.0%} of the "
        "model's calibrated ratio (the reference's, else the run's lowest-concurrency trial); "
        f"Σ prompt_tokens / Σ local prompt tokens within {PROMPT_RATIO_BOUNDS}"
    )
    if not measured:
        return result(
            "token_counts",
            WARN,
            "not measured: no local output counts in the raw records",
            rule,
            {"trials": rows},
        )
    base: float
    if expected_output_ratio is not None:
        base, base_source = expected_output_ratio, "model reference"
    else:
        lowest = min(measured, key=lambda r: (r["concurrency"], r["trial"]))
        base, base_source = lowest["output_ratio"], f"trial {lowest['trial']} (lowest load)"
    bad: list[str] = []
    if base <= 0:  # no ratio to hold the trials to: the server counted no output at all
        bad.append(f"server output counts are {base:.2f}× the local count ({base_source})")
    for r in rows:
        if r["output_ratio"] is not None and base > 0:
            r["deviation"] = r["output_ratio"] / base - 1
            if abs(r["deviation"]) > tolerance:
                bad.append(
                    f"trial {r['trial']} (N={r['concurrency']}): server counts "
                    f"{r['output_ratio']:.2f}× the local output count, expected {base:.2f}×"
                )
        pr = r["prompt_ratio"]
        if pr is not None and not PROMPT_RATIO_BOUNDS[0] <= pr <= PROMPT_RATIO_BOUNDS[1]:
            bad.append(f"trial {r['trial']}: prompt_tokens {pr:.2f}× the local prompt count")
    worst = max((abs(r.get("deviation", 0.0)) for r in rows), default=0.0)
    summary = (
        "; ".join(bad[:4])
        if bad
        else f"server output counts within {worst:.1%} of {base:.2f}× the local count "
        f"({base_source}) in all {len(measured)} trials"
    )
    return result(
        "token_counts",
        FAIL if bad else PASS,
        summary,
        rule,
        {
            "expected_output_ratio": base,
            "baseline": base_source,
            "tolerance": tolerance,
            "trials": rows,
        },
    )


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


def _server_deltas(trials: Sequence[TrialData]) -> dict[str, float]:
    total: dict[str, float] = {}
    for t in trials:
        scraped = (t.telemetry or {}).get("server_metrics") or {}
        start, end = scraped.get("start"), scraped.get("end")
        if isinstance(start, dict) and isinstance(end, dict):
            for name, value in speculative.window_delta(start, end).items():
                if name in (
                    speculative.SIM_ACCELERATORS,
                    speculative.SGLANG_ACCEPT_LENGTH,
                    speculative.SGLANG_CACHE_HIT_RATE,
                ):
                    total[name] = value
                else:
                    total[name] = total.get(name, 0.0) + value
    return total


def check_cache_honesty(
    trajectories: dict[str, Trajectory] | None, trials: Sequence[TrialData]
) -> dict[str, Any]:
    """No request reports more cached tokens than its own session could have cached."""
    rule = (
        "per request: cached_tokens <= (longest prefix this agent session sent before + tools "
        f"block) + max({CACHE_ALLOWANCE_TOKENS} tokens, {CACHE_ALLOWANCE_FRACTION:.0%} of the "
        f"prompt); fail when over {CACHE_MAX_FLAGGED_FRACTION:.1%} of requests exceed it"
    )
    deltas = _server_deltas(trials)
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
    if frac > CACHE_MAX_FLAGGED_FRACTION and len(flagged) >= 2:
        status = FAIL
        summary = (
            f"{len(flagged)} of {len(bounds)} requests reported more cached tokens than their "
            f"own session could have cached ({round(excess_total)} tokens too many): the "
            "server reuses cache across agents"
        )
    elif flagged:
        status = WARN
        summary = f"{len(flagged)} of {len(bounds)} requests above the honest bound"
    else:
        status = PASS
        summary = f"all {len(bounds)} requests within what their own session could have cached" + (
            f"; server prefix-cache hit rate {server_rate:.1%}" if server_rate else ""
        )
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


# ----------------------------------------------------------------- speculative decoding


def check_speculative(config: dict[str, Any], trials: Sequence[TrialData]) -> dict[str, Any]:
    """No setting that fakes acceptance; acceptance measured from /metrics deltas."""
    rule = (
        "no setting that fakes draft acceptance (vLLM rejection_sample_method: synthetic, "
        "synthetic_acceptance_length; SGLANG_SIMULATE_ACC_LEN; "
        "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS); acceptance rate = Δaccepted / Δdraft "
        "tokens and mean acceptance length = 1 + Δaccepted / Δdrafts over the windows; a "
        f"rate >= {speculative.IMPLAUSIBLE_RATE:.0%} over >= "
        f"{speculative.IMPLAUSIBLE_MIN_DRAFT_TOKENS} draft tokens is forced acceptance"
    )
    findings = speculative.fake_acceptance_findings(config or {})
    deltas = _server_deltas(trials)
    figures = speculative.spec_figures(deltas)
    declared = (config or {}).get("speculative")
    scraped = any(((t.telemetry or {}).get("server_metrics") or {}).get("end") for t in trials)
    evidence: dict[str, Any] = {
        "config_findings": findings,
        "declared": declared,
        "metrics": figures,
        "windows_scraped": scraped,
        "prefix_cache_hit_rate": speculative.prefix_cache_hit_rate(deltas),
    }
    if findings:
        where = ", ".join(f"{f['path']} ({f['setting']})" for f in findings[:3])
        return result(
            "speculative_decoding",
            FAIL,
            f"the config fakes draft acceptance: {where}",
            rule,
            evidence,
        )
    if figures is not None:
        rate = figures.get("acceptance_rate")
        length = figures.get("mean_acceptance_length")
        text = (f"acceptance rate {rate:.1%}" if rate is not None else "acceptance rate n/a") + (
            f", mean acceptance length {length:.2f}" if length else ""
        )
        if (
            rate is not None
            and rate >= speculative.IMPLAUSIBLE_RATE
            and figures.get("draft_tokens", 0) >= speculative.IMPLAUSIBLE_MIN_DRAFT_TOKENS
        ):
            return result(
                "speculative_decoding",
                FAIL,
                f"{text} over {figures['draft_tokens']:.0f} draft tokens: every draft "
                "accepted is forced acceptance, not a drafter",
                rule,
                evidence,
            )
        return result(
            "speculative_decoding", PASS, text + " (from /metrics over the windows)", rule, evidence
        )
    if declared:
        return result(
            "speculative_decoding",
            WARN,
            "not measured: speculative decoding is declared but /metrics gave no draft counters",
            rule,
            evidence,
        )
    return result(
        "speculative_decoding",
        PASS,
        "no speculative decoding declared"
        + ("" if not scraped else " and no drafts counted in /metrics"),
        rule,
        evidence,
    )


# ----------------------------------------------------------------------- model identity


def check_quality_distribution(
    qualification: Sequence[dict[str, Any]],
    reference: dict[str, Any] | None,
    *,
    model: str,
    weight_precision: str | None,
) -> dict[str, Any]:
    """Next-token distributions against the reference deployment's (docs/verification.md
    "quality_distribution"): mean KL and top-1 agreement within the precision's limits."""
    rule = (
        "along the reference texts' token sequences, mean KL(reference ‖ deployment) under "
        "the top-k overlap rule and top-1 agreement are within the limits of the "
        "deployment's precision class"
    )
    if not reference or not reference.get("distributions"):
        return result(
            "quality_distribution",
            WARN,
            f"quality: no reference for {model}",
            rule,
            {"model": model},
        )
    probe = next((p for p in qualification if p.get("name") == "next_token_distributions"), None)
    evidence: dict[str, Any] = {
        "reference": reference.get("source"),
        "deployment": reference.get("deployment"),
        "reference_precision": reference.get("precision"),
    }
    if probe is None:
        return result(
            "quality_distribution",
            FAIL,
            "the runner reported no next-token distributions",
            rule,
            evidence,
        )
    compared = quality.compare_distributions(probe.get("evidence"), reference)
    status, summary, limits = quality.distribution_verdict(
        compared, weight_precision=weight_precision
    )
    evidence.update(limits=limits, **compared)
    return result(
        "quality_distribution", PASS if status == "pass" else FAIL, summary, rule, evidence
    )


def check_quality_task(
    qualification: Sequence[dict[str, Any]], reference: dict[str, Any] | None, *, model: str
) -> dict[str, Any]:
    """HumanEval pass@1, idle and under load, against the reference deployment's on the same
    problems (docs/verification.md "quality_task")."""
    rule = (
        "HumanEval completions executed in the sandbox: pass@1 idle and under the highest "
        "passing load is not significantly lower than the reference deployment's (one-sided "
        "two-proportion test at 5 %)"
    )
    tasks = (reference or {}).get("tasks") or {}
    if not tasks.get("outcomes"):
        return result(
            "quality_task",
            WARN,
            f"task check: no reference score for {model}",
            rule,
            {"model": model},
        )
    ref_passed = {o["task_id"]: bool(o["passed"]) for o in tasks["outcomes"]}
    phases: dict[str, Any] = {}
    statuses = []
    for phase in ("idle", "under_load"):
        probe = next((p for p in qualification if p.get("name") == f"task_{phase}"), None)
        measured = (probe or {}).get("evidence") or {}
        outcomes = [o for o in measured.get("outcomes") or [] if o.get("task_id") in ref_passed]
        if not outcomes:
            phases[phase] = {"summary": (probe or {}).get("summary") or "not run"}
            statuses.append("missing")
            continue
        ours: dict[str, float] = {
            "passed": sum(bool(o["passed"]) for o in outcomes),
            "problems": len(outcomes),
        }
        ours["pass_at_1"] = round(ours["passed"] / ours["problems"], 4)
        ref: dict[str, float] = {
            "passed": sum(ref_passed[o["task_id"]] for o in outcomes),
            "problems": len(outcomes),
        }
        ref["pass_at_1"] = round(ref["passed"] / ref["problems"], 4)
        verdict, summary, figures = taskcheck.task_verdict(ours, ref)
        phases[phase] = {
            "verdict": verdict,
            "summary": summary,
            **figures,
            "concurrency": measured.get("concurrency"),
            "outcomes": outcomes,
        }
        statuses.append(verdict)
    evidence = {
        "suite": tasks.get("suite"),
        "reference": reference.get("source") if reference else None,
        "phases": phases,
    }
    text = "; ".join(f"{k.replace('_', ' ')}: {v['summary']}" for k, v in phases.items())
    if "fail" in statuses:
        return result("quality_task", FAIL, text, rule, evidence)
    if "missing" in statuses or "n/a" in statuses:
        return result("quality_task", WARN, text, rule, evidence)
    return result("quality_task", PASS, text, rule, evidence)


def check_model_identity(
    qualification: Sequence[dict[str, Any]],
    reference: dict[str, Any] | None,
    *,
    model: str,
    weight_precision: str | None = None,
) -> dict[str, Any]:
    rule = (
        "greedy answers to the canary prompts equal the reference deployment's; where both "
        "sides have logprobs, a divergence passes only if at the first differing token each "
        "side's token is in the other's top-k; a lower-precision deployment whose answers "
        "drift passes when its next-token distributions pass quality_distribution"
    )
    probe = next((p for p in qualification if p.get("name") == "canary_outputs"), None)
    if reference is None:
        return result(
            "model_identity",
            WARN,
            f"no reference outputs recorded for {model}",
            rule,
            {"model": model},
        )
    if probe is None:
        return result(
            "model_identity",
            FAIL,
            "the runner reported no canary answers",
            rule,
            {"reference": reference.get("source")},
        )
    compared = compare_canaries(probe.get("evidence"), reference)
    diverged = [c for c in compared if c["match"] in ("diverged", "missing")]
    near = [c for c in compared if c["match"] == "near_tie"]
    evidence = {
        "reference": reference.get("source"),
        "deployment": reference.get("deployment"),
        "canaries": compared,
    }
    if diverged:
        missing = [c for c in diverged if c["match"] == "missing"]
        dist = check_quality_distribution(
            qualification, reference, model=model, weight_precision=weight_precision
        )
        evidence["distribution"] = {
            k: dist["evidence"].get(k) for k in ("mean_kl", "top1_agreement", "limits")
        }
        if not missing and dist["status"] == PASS:
            return result(
                "model_identity",
                PASS,
                f"{len(diverged)} of {len(compared)} greedy canary answers drift from "
                f"the reference, as {weight_precision} may; its next-token "
                f"distributions match ({dist['summary']})",
                rule,
                evidence,
            )
        return result(
            "model_identity",
            FAIL,
            f"{len(diverged)} of {len(compared)} canary answers differ from the "
            f"reference deployment of {model}: another model or other weights",
            rule,
            evidence,
        )
    return result(
        "model_identity",
        PASS,
        f"{len(compared) - len(near)} of {len(compared)} canary answers match exactly"
        + (f", {len(near)} diverge at a near tie" if near else ""),
        rule,
        evidence,
    )


# ------------------------------------------------------------------------ repeatability


def _rel_spread(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return (max(values) - min(values)) / mean if mean > 0 else 0.0


def _intervals_overlap(trials: Sequence[TrialData], name: str) -> bool:
    """Whether the trials' 95% session-bootstrap intervals of `name` share a common point:
    then their disagreement is within sampling noise (few requests), not a changed system."""
    bounds = []
    for t in trials:
        stats = t.metrics.get("statistics") or {}
        interval = (stats.get("intervals") or {}).get(name) or {}
        low, high = interval.get("low"), interval.get("high")
        if low is None or high is None:
            return False
        bounds.append((float(low), float(high)))
    return max(lo for lo, _ in bounds) <= min(hi for _, hi in bounds)


def check_repeatability(
    trials: Sequence[TrialData], *, shared_host: bool = False
) -> dict[str, Any]:
    """``shared_host``: the pool's search options say its host also runs other work (the
    local CPU pool shares the web tier's host), so a spread beyond tolerance is reported as
    a warning, not a failure: it measures the host's other load as much as the system."""
    rule = (
        f"trials repeated at the same N (confirmations, marginal repeats) agree: p25 speed "
        f"spread <= {SPEED_TOLERANCE:.0%} of its mean, TTFT p75 spread <= "
        f"{TTFT_TOLERANCE:.0%} (or {TTFT_TOLERANCE_ABS_S * 1000:.0f} ms); up to twice that "
        "warns, beyond fails — unless the trials' 95% session-bootstrap intervals overlap, "
        "when the spread is sampling noise and only warns"
        + ("; on a pool whose host is shared with other work it only warns" if shared_host else "")
    )
    by_n: dict[int, list[TrialData]] = {}
    for t in trials:
        by_n.setdefault(t.concurrency, []).append(t)
    groups: list[dict[str, Any]] = []
    worst = PASS
    notes = []
    for n, ts in sorted(by_n.items()):
        if len(ts) < 2:
            continue
        speeds = [float(t.metrics.get("p25_output_speed") or 0.0) for t in ts]
        ttfts = [(t.metrics.get("ttft_s") or {}).get("p75") for t in ts]
        speed_spread = _rel_spread(speeds)
        finite = [float(x) for x in ttfts if x is not None and math.isfinite(float(x))]
        ttft_spread = _rel_spread(finite) if len(finite) == len(ttfts) else None
        ttft_abs = max(finite) - min(finite) if finite and len(finite) == len(ttfts) else None
        status = PASS
        noise = []
        if speed_spread > 2 * SPEED_TOLERANCE:
            if _intervals_overlap(ts, "p25_output_speed"):
                status = WARN
                noise.append("p25 speed")
            else:
                status = FAIL
        elif speed_spread > SPEED_TOLERANCE:
            status = WARN
        if ttft_spread is not None and ttft_abs is not None and ttft_abs > TTFT_TOLERANCE_ABS_S:
            if ttft_spread > 2 * TTFT_TOLERANCE:
                if _intervals_overlap(ts, "ttft_p75"):
                    status = WARN if status == PASS else status
                    noise.append("TTFT p75")
                else:
                    status = FAIL
            elif ttft_spread > TTFT_TOLERANCE and status == PASS:
                status = WARN
        downgraded = status == FAIL and shared_host
        if downgraded:
            status = WARN
        if status != PASS:
            why = (
                [f"{' and '.join(noise)} within sampling noise: intervals overlap"] if noise else []
            )
            if downgraded:
                why.append("the host is shared with other work: reported, not failed")
            notes.append(
                f"N={n}: p25 speed spread {speed_spread:.1%}"
                + (f", TTFT p75 spread {ttft_spread:.1%}" if ttft_spread else "")
                + (f" ({'; '.join(why)})" if why else "")
            )
        worst = worst_status((worst, status))
        groups.append(
            {
                "concurrency": n,
                "trials": [t.index for t in ts],
                "phases": [t.phase for t in ts],
                "p25_output_speed": speeds,
                "ttft_p75_s": ttfts,
                "speed_spread": speed_spread,
                "ttft_spread": ttft_spread,
                "sampling_noise": noise,
                "shared_host_warning": downgraded,
                "status": status,
            }
        )
    if not groups:
        return result(
            "repeatability",
            WARN,
            "no trial was repeated: nothing confirms the results",
            rule,
            {"groups": []},
        )
    summary = (
        "; ".join(notes)
        if notes
        else (
            f"{len(groups)} repeated concurrencies agree (largest p25 speed spread "
            f"{max(g['speed_spread'] for g in groups):.1%})"
        )
    )
    return result("repeatability", worst, summary, rule, {"groups": groups})


# -------------------------------------------------------------------------- telemetry


def accelerators_seen(
    run_telemetry: dict[str, Any], trials: Sequence[TrialData]
) -> tuple[int | None, str]:
    """(accelerators the runner saw in use, where from); None when nothing was seen."""
    sim = [
        ((t.telemetry or {}).get("server_metrics") or {})
        .get("end", {})
        .get(speculative.SIM_ACCELERATORS)
        for t in trials
    ]
    sim_values = [int(v) for v in sim if v is not None]
    if sim_values:
        return max(sim_values), "simulator /metrics (sim:accelerators_used)"
    accels = (run_telemetry or {}).get("accelerators") or []
    if (run_telemetry or {}).get("measured") and accels:
        used = [a for a in accels if (a.get("memory_used_mib") or 0) >= 1024]
        if any("memory_used_mib" in a for a in accels):
            return len(used), f"{run_telemetry.get('tool')} (accelerators with >= 1 GiB in use)"
        return len(accels), f"{run_telemetry.get('tool')} (accelerators listed)"
    return None, (run_telemetry or {}).get("reason") or "not measured"


def check_accelerators(
    claimed: int | None, run_telemetry: dict[str, Any], trials: Sequence[TrialData]
) -> dict[str, Any]:
    rule = "the accelerators the runner sees in use equal the config's accelerators used"
    seen, source = accelerators_seen(run_telemetry, trials)
    evidence = {
        "claimed": claimed,
        "seen": seen,
        "source": source,
        "inventory": (run_telemetry or {}).get("accelerators") or [],
    }
    if seen is None or claimed is None:
        return result("accelerators", WARN, f"not measured: {source}", rule, evidence)
    if seen != claimed:
        return result(
            "accelerators",
            FAIL,
            f"the config claims {claimed} accelerators used; {source} shows {seen}",
            rule,
            evidence,
        )
    return result(
        "accelerators",
        PASS,
        f"{seen} accelerators seen, {claimed} claimed ({source})",
        rule,
        evidence,
    )


def check_power(trials: Sequence[TrialData]) -> dict[str, Any]:
    rule = (
        f"power covers >= {POWER_MIN_COVERAGE:.0%} of each window with no gap over "
        f"{POWER_MAX_GAP_S:g} s; energy-counter deltas are preferred to integrating sampled "
        "power; the denominator (accelerator board power or wall power) is stated; never "
        "estimated"
    )
    rows = []
    bad = []
    for t in trials:
        tel = t.telemetry or {}
        if not tel.get("measured"):
            continue
        row = {
            k: tel.get(k)
            for k in (
                "power_w",
                "energy_j",
                "coverage",
                "max_gap_s",
                "method",
                "denominator",
                "samples",
                "tool",
            )
        }
        row["trial"] = t.index
        rows.append(row)
        coverage, gap = tel.get("coverage"), tel.get("max_gap_s")
        if coverage is None or coverage < POWER_MIN_COVERAGE:
            bad.append(f"trial {t.index}: coverage {coverage}")
        if gap is None or gap > POWER_MAX_GAP_S:
            bad.append(f"trial {t.index}: gap {gap} s")
    if not rows:
        reasons = {str((t.telemetry or {}).get("reason") or "not measured") for t in trials}
        return result(
            "telemetry", WARN, "; ".join(sorted(reasons)) or "not measured", rule, {"trials": []}
        )
    methods = sorted({str(r.get("method")) for r in rows})
    denominators = sorted({str(r.get("denominator")) for r in rows})
    if bad:
        return result(
            "telemetry", FAIL, "power incomplete: " + "; ".join(bad[:4]), rule, {"trials": rows}
        )
    return result(
        "telemetry",
        PASS,
        f"power measured in {len(rows)} trials by {', '.join(methods)}; denominator: "
        f"{', '.join(denominators)}",
        rule,
        {"trials": rows},
    )


# ------------------------------------------------------------------------- load generator


def check_load_generator(trials: Sequence[TrialData]) -> dict[str, Any]:
    """Every trial's load generator was healthy; for sharded trials (docs/engine.md
    "Sharded trials") every shard was, its clock offset was known within 1 ms, and the
    shards ran all N agents."""
    from agentperf.engine.clocksync import MAX_UNCERTAINTY_NS

    rule = (
        "every shard of every trial healthy (CPU, event-loop lag, first-token stamping delay "
        f"under the trial's limits), clock offsets known within {MAX_UNCERTAINTY_NS / 1e6:g} ms, "
        "the shards' agents adding up to N; a one-process trial's client healthy"
    )
    rows: list[dict[str, Any]] = []
    bad: list[str] = []
    sharded = 0
    for t in trials:
        lg = t.metrics.get("load_generator") or {}
        client = t.metrics.get("client") or {}
        if lg:
            sharded += 1
            per = lg.get("per_shard") or []
            rows.append(
                {
                    "trial": t.index,
                    "concurrency": t.concurrency,
                    "shards": lg.get("shards"),
                    "agents": [p.get("agents") for p in per],
                    "hosts": sorted({str(p.get("host")) for p in per}),
                    "max_cpu_percent": max(
                        (p["health"].get("cpu_percent") or 0 for p in per), default=None
                    ),
                    "max_clock_uncertainty_ns": lg.get("max_clock_uncertainty_ns"),
                    "failed_attempts": len(lg.get("failed_attempts") or []),
                }
            )
            if sum(int(p.get("agents") or 0) for p in per) != t.concurrency:
                bad.append(
                    f"trial {t.index}: shards ran {sum(p.get('agents') or 0 for p in per)}"
                    f" of {t.concurrency} agents"
                )
            for reason in lg.get("reasons") or []:
                bad.append(f"trial {t.index}: {reason}")
            if int(lg.get("max_clock_uncertainty_ns") or 0) > MAX_UNCERTAINTY_NS:
                bad.append(f"trial {t.index}: clock offset uncertainty over 1 ms")
        elif client and client.get("healthy") is False:
            bad.append(f"trial {t.index}: client unhealthy: {client.get('reason')}")
    evidence = {"sharded_trials": sharded, "trials": rows}
    if bad:
        return result("load_generator", FAIL, "; ".join(bad[:4]), rule, evidence)
    if not sharded:
        return result(
            "load_generator",
            PASS,
            f"one load-generator process per trial; its client was healthy in all "
            f"{len(trials)} trials",
            rule,
            evidence,
        )
    shards = sorted({int(r["shards"] or 0) for r in rows})
    hosts = sorted({h for r in rows for h in r["hosts"]})
    return result(
        "load_generator",
        PASS,
        f"{sharded} trials sharded over {'/'.join(map(str, shards))} load-generator "
        f"processes on {len(hosts)} host(s), every shard healthy, clocks within 1 ms",
        rule,
        evidence,
    )


# ------------------------------------------------------------------------- statistics


def check_statistics(trials: Sequence[TrialData], result_ns: Iterable[int]) -> dict[str, Any]:
    rule = (
        "each trial carries bootstrap intervals (resampling agent sessions) for p25 speed and "
        "the TTFT percentiles; a trial reported as a result has at least the MLPerf-style "
        "minimum requests for its percentiles (the true quantile inside ±margin at 99%)"
    )
    ns = set(result_ns)
    rows = []
    short = []
    for t in trials:
        stats = (t.metrics or {}).get("statistics") or {}
        if not stats:
            continue
        minimum = {k: v.get("min_requests") for k, v in (stats.get("min_requests") or {}).items()}
        need = max((v for v in minimum.values() if v), default=0)
        requests = int(t.metrics.get("requests") or 0)
        intervals = stats.get("intervals") or {}
        rows.append(
            {
                "trial": t.index,
                "concurrency": t.concurrency,
                "requests": requests,
                "min_requests": minimum,
                "ci_width": {k: v.get("width") for k, v in intervals.items()},
                "marginal": stats.get("marginal") or [],
            }
        )
        if t.concurrency in ns and requests < need:
            short.append(f"N={t.concurrency} (trial {t.index}): {requests} < {need}")
    if not rows:
        return result(
            "statistics", WARN, "no intervals were computed for these trials", rule, {"trials": []}
        )
    if short:
        return result(
            "statistics",
            WARN,
            "too few requests for the percentiles to hold at 99%: " + "; ".join(short[:4]),
            rule,
            {"trials": rows},
        )
    return result(
        "statistics",
        PASS,
        f"intervals for {len(rows)} trials; every result trial has enough requests",
        rule,
        {"trials": rows},
    )
