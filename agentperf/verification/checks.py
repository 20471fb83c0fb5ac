"""The verification checks beyond the basic ones, as pure functions of plain data.

Each returns ``{"name", "status": pass|warn|fail, "summary", "rule", "evidence"}``. They
take trials (``TrialData``: what a Trial row holds, plus its raw records), the dataset's
trajectories, the config and the qualification probes — never the database — so the same
functions judge a run stored by the pipeline and a run made in a test on virtual time.
docs/verification.md states every rule and tolerance.

This module holds the plain data every check takes and the checks of what the server
answered: its token counts, speculative decoding, and the model's identity and quality.
The prefix cache's checks are in ``verification.cache``; the checks of the measurement
itself (repeats, telemetry, load generator, statistics) in ``verification.measurement``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentperf.engine.metrics import RequestRecord
from agentperf.verification import quality, speculative, taskcheck
from agentperf.verification.fingerprint import compare_canaries
from agentperf.verification.status import FAIL, PASS, WARN

# token_counts
OUTPUT_RATIO_TOLERANCE = 0.15
# standard errors a trial's deviation must clear beyond the tolerance to fail
SAMPLING_Z = 2.0
# The most an honest server's per-request ratio spreads, relative to the ratio: 0.12 measured
# on the tiny random-weight model on this CPU, the noisiest text the platform serves
# (benchmarks/results/token_ratio_spread.json, docs/verification.md "token_counts"), rounded
# up. A trial's standard error is never taken above what that spread gives: a server that
# pads unevenly widens its own spread, and that must not excuse its inflation.
HONEST_REQUEST_SPREAD = 0.15
PROMPT_RATIO_BOUNDS = (0.5, 2.0)


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


def server_deltas(trials: Sequence[TrialData]) -> dict[str, float]:
    """The server's /metrics counters over every trial's window, summed (a gauge, such as
    the simulator's accelerators or SGLang's acceptance length, is the last window's)."""
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


# ------------------------------------------------------------------------- token counts


@dataclass(frozen=True, slots=True)
class RatioEstimate:
    """Σ server count ÷ Σ local count over a trial's requests, and that ratio's standard
    error by the ratio estimator's linearisation: √(Σ (aᵢ − R·bᵢ)² / (n (n − 1))) ÷ mean b.
    ``se`` is None below two requests (no spread to estimate it from)."""

    ratio: float
    se: float | None
    requests: int


def ratio_estimate(pairs: Sequence[tuple[float, float]]) -> RatioEstimate | None:
    """The estimate over ``(server, local)`` count pairs; None without a local count."""
    n = len(pairs)
    local = sum(b for _, b in pairs)
    if n == 0 or local <= 0:
        return None
    ratio = sum(a for a, _ in pairs) / local
    if n < 2:
        return RatioEstimate(ratio, None, n)
    spread = sum((a - ratio * b) ** 2 for a, b in pairs) / (n * (n - 1))
    return RatioEstimate(ratio, math.sqrt(spread) / (local / n), n)


def judged_se(estimate: RatioEstimate) -> float:
    """The standard error a trial's ratio is judged with: the observed one, never above an
    honest server's (``HONEST_REQUEST_SPREAD`` of the ratio per request; a single request,
    with no spread of its own, gets that)."""
    honest = HONEST_REQUEST_SPREAD * estimate.ratio / math.sqrt(estimate.requests)
    return honest if estimate.se is None else min(estimate.se, honest)


def _deviation_sd(trial: RatioEstimate, base: float, base_se: float) -> float:
    """The standard error of ``trial.ratio / base - 1`` (both ratios' errors, independent
    trials)."""
    return math.hypot(judged_se(trial) / base, trial.ratio * base_se / base**2)


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def _token_rows(
    trials: Sequence[TrialData],
) -> tuple[list[dict[str, Any]], dict[int, RatioEstimate]]:
    """Per trial: its window's output-ratio estimate and prompt ratio (the evidence rows),
    and the estimates by trial index."""
    rows: list[dict[str, Any]] = []
    estimates: dict[int, RatioEstimate] = {}
    for t in trials:
        ok = [r for r in t.in_window() if r.ok]
        with_out = [r for r in ok if r.n_out is not None and r.local_output_tokens]
        with_in = [r for r in ok if r.n_in and r.local_prompt_tokens]
        estimate = ratio_estimate(
            [(float(r.n_out or 0), float(r.local_output_tokens or 0)) for r in with_out]
        )
        in_ratio = _ratio(
            sum(r.n_in or 0 for r in with_in), sum(r.local_prompt_tokens or 0 for r in with_in)
        )
        if estimate is not None:
            estimates[t.index] = estimate
        rows.append(
            {
                "trial": t.index,
                "concurrency": t.concurrency,
                "requests": len(with_out),
                "output_ratio": estimate.ratio if estimate else None,
                "output_ratio_se": estimate.se if estimate else None,
                "prompt_ratio": in_ratio,
            }
        )
    return rows, estimates


def _judge_output(
    rows: list[dict[str, Any]],
    estimates: dict[int, RatioEstimate],
    baseline: tuple[float, float],
    tolerance: float,
    bad: list[str],
    unsure: list[str],
) -> None:
    """Each trial's output ratio against the baseline (ratio, standard error): its
    deviation and that deviation's standard error go on its row; a deviation past the
    tolerance goes to ``bad`` when its interval clears the tolerance, else to ``unsure``."""
    base, base_se = baseline
    for r in rows:
        estimate = estimates.get(r["trial"])
        if estimate is not None:
            deviation = estimate.ratio / base - 1
            sd = _deviation_sd(estimate, base, base_se)
            r["deviation"] = deviation
            r["deviation_sd"] = sd
            if abs(deviation) > tolerance:
                said = (
                    f"trial {r['trial']} (N={r['concurrency']}): server counts "
                    f"{estimate.ratio:.2f}× the local output count, expected {base:.2f}×"
                )
                if abs(deviation) - SAMPLING_Z * sd > tolerance:
                    bad.append(said)
                else:
                    unsure.append(
                        f"{said}, within chance over {estimate.requests} requests "
                        f"(sampling spread ±{SAMPLING_Z * sd:.0%})"
                    )


def check_token_counts(
    trials: Sequence[TrialData],
    *,
    expected_output_ratio: float | None = None,
    tolerance: float = OUTPUT_RATIO_TOLERANCE,
) -> dict[str, Any]:
    """Server token counts against the local offline count (output and prompt).

    A trial's output ratio is judged against its sampling error: it fails only when the
    whole interval of ±``SAMPLING_Z`` standard errors around its deviation lies beyond the
    tolerance; a deviation past the tolerance that the trial's few requests cannot tell
    from chance is a warning (docs/verification.md "token_counts")."""
    rows, estimates = _token_rows(trials)
    measured = [r for r in rows if r["output_ratio"] is not None]
    rule = (
        f"per trial, Σ completion_tokens / Σ local output tokens within ±{tolerance:.0%} of the "
        "model's calibrated ratio (the reference's, else the run's lowest-concurrency trial): "
        f"fail when the deviation's ±{SAMPLING_Z:g} standard-error interval lies wholly beyond "
        "it (a trial's standard error at most an honest server's: "
        f"{HONEST_REQUEST_SPREAD:.0%} of the ratio per request), warn when it lies beyond it "
        "but the trial's requests cannot tell it from chance; "
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
    base_se: float
    if expected_output_ratio is not None:
        base, base_se, base_source = expected_output_ratio, 0.0, "model reference"
    else:
        lowest = min(measured, key=lambda r: (r["concurrency"], r["trial"]))
        base, base_se = lowest["output_ratio"], judged_se(estimates[lowest["trial"]])
        base_source = f"trial {lowest['trial']} (lowest load)"
    bad: list[str] = []
    unsure: list[str] = []
    if base <= 0:  # no ratio to hold the trials to: the server counted no output at all
        bad.append(f"server output counts are {base:.2f}× the local count ({base_source})")
    if base > 0:
        _judge_output(rows, estimates, (base, base_se), tolerance, bad, unsure)
    for r in rows:
        pr = r["prompt_ratio"]
        if pr is not None and not PROMPT_RATIO_BOUNDS[0] <= pr <= PROMPT_RATIO_BOUNDS[1]:
            bad.append(f"trial {r['trial']}: prompt_tokens {pr:.2f}× the local prompt count")
    worst = max((abs(r.get("deviation", 0.0)) for r in rows), default=0.0)
    if bad or unsure:
        summary = "; ".join([*bad, *unsure][:4])
    else:
        summary = (
            f"server output counts within {worst:.1%} of {base:.2f}× the local count "
            f"({base_source}) in all {len(measured)} trials"
        )
    return result(
        "token_counts",
        FAIL if bad else (WARN if unsure else PASS),
        summary,
        rule,
        {
            "expected_output_ratio": base,
            "baseline": base_source,
            "tolerance": tolerance,
            "sampling_z": SAMPLING_Z,
            "honest_request_spread": HONEST_REQUEST_SPREAD,
            "trials": rows,
        },
    )


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
    deltas = server_deltas(trials)
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
