"""The basic verification report of a finished run (docs/verification.md), computed from what
the run stored: a pure function of `RunEvidence`, its trials (`TrialData`, with their raw
records) and the dataset's trajectories. The web side builds the evidence from its rows and
stores the report (runs/verification_report.py: it only loads and stores); the
verification harness builds it from a run's documents.

The report's own checks, each with its evidence: qualification probes, request accounting
(sent = ok + failed, raw records complete), output lengths honoured, error rate, raw records
stored, private test set used; then every check of `agentperf.verification.checks` (token
counts, speculative decoding, model identity, quality), `.cache` (cache honesty and truth)
and `.measurement` (repeatability, statistics, load generator, accelerators, power), and
the inventory's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentperf import contract
from agentperf.engine.trajectory import Trajectory
from agentperf.inventory import check_inventory, check_slurm_nodes
from agentperf.verification.cache import check_cache_honesty, check_cache_truth
from agentperf.verification.checks import (
    TrialData,
    check_model_identity,
    check_quality_distribution,
    check_quality_task,
    check_speculative,
    check_token_counts,
)
from agentperf.verification.fingerprint import load_reference
from agentperf.verification.measurement import (
    check_accelerators,
    check_load_generator,
    check_power,
    check_repeatability,
    check_statistics,
)
from agentperf.verification.status import FAIL, PASS, WARN, worst_status


@dataclass(frozen=True, slots=True)
class DatasetEvidence:
    """The dataset the run was dispatched with, as recorded."""

    name: str
    version: str
    sha256: str
    private: bool


@dataclass(frozen=True, slots=True)
class RunEvidence:
    """What a finished run stored, as the report's checks read it."""

    spec: contract.RunSpec
    search_summary: contract.SearchSummary | None
    qualification: list[dict[str, Any]]  # the last qualification report's checks
    telemetry: dict[str, Any]  # the completion's host inventory
    runner_info: dict[str, Any]  # merged from every report of the run
    dataset: DatasetEvidence | None
    config: dict[str, Any]  # the submission's deployment config
    accelerator: str = ""  # the catalog hardware system's accelerator name

    @property
    def endpoint(self) -> dict[str, Any]:
        endpoint: dict[str, Any] = self.runner_info.get("endpoint") or {}
        return endpoint


def _check(
    name: str, status: str, summary: str, rule: str, evidence: dict[str, Any]
) -> dict[str, Any]:
    return {"name": name, "status": status, "summary": summary, "rule": rule, "evidence": evidence}


def check_qualification(run: RunEvidence) -> dict[str, Any]:
    probes = run.qualification
    if not probes:
        return _check(
            "qualification",
            FAIL,
            "no qualification probes were reported",
            "the runner probes the endpoint before load",
            {},
        )
    worst = worst_status(p.get("status", FAIL) for p in probes)
    failed = [p["name"] for p in probes if p.get("status") != PASS]
    summary = (
        f"all {len(probes)} probes passed"
        if not failed
        else f"{len(probes) - len(failed)} of {len(probes)} probes passed; not: {', '.join(failed)}"
    )
    return _check(
        "qualification",
        worst,
        summary,
        "claimed model served, streaming, exact output length with ignore_eos, usage and "
        "cached tokens reported",
        {"probes": [{k: p.get(k) for k in ("name", "status", "summary")} for p in probes]},
    )


def check_request_accounting(trials: Sequence[TrialData]) -> dict[str, Any]:
    bad = []
    rows = []
    for t in trials:
        m = contract.trial_metrics(t.metrics)
        sent, ok, failed, total = m.requests, m.ok, m.failed, m.requests_total
        row = {
            "trial": t.index,
            "sent": sent,
            "ok": ok,
            "failed": failed,
            "records_total": total,
            "raw_records": t.raw_records_count,
        }
        rows.append(row)
        if sent != ok + failed:
            bad.append(f"trial {t.index}: sent {sent} != ok {ok} + failed {failed}")
        elif t.raw_records_count != total:
            bad.append(f"trial {t.index}: {t.raw_records_count} raw records, {total} requests")
    return _check(
        "request_accounting",
        FAIL if bad else PASS,
        "; ".join(bad[:5])
        if bad
        else f"sent = ok + failed in all {len(rows)} trials, and every request has its raw record",
        "per trial: requests sent in the window = ok + failed; raw records = all requests",
        {"trials": rows},
    )


def check_output_lengths(trials: Sequence[TrialData]) -> dict[str, Any]:
    metrics = {t.index: contract.trial_metrics(t.metrics) for t in trials}
    wrong = {i: m.errors_by_class.get("wrong_length", 0) for i, m in metrics.items()}
    total = sum(wrong.values())
    sent = sum(m.requests for m in metrics.values())
    status = PASS if total == 0 else (WARN if sent and total / sent <= 0.001 else FAIL)
    return _check(
        "output_lengths",
        status,
        "every answer had exactly the requested length"
        if total == 0
        else f"{total} of {sent} requests returned another length than requested",
        "completion_tokens == max_tokens (ignore_eos) for every request",
        {"wrong_length_by_trial": {str(k): v for k, v in wrong.items() if v}},
    )


def check_error_rate(run: RunEvidence, trials: Sequence[TrialData]) -> dict[str, Any]:
    limit = min(t.max_error_rate for t in run.spec.tiers)
    summary = run.search_summary
    passing_ns = {n for n in (summary.max_agents if summary else {}).values() if n}
    metrics = {t.index: contract.trial_metrics(t.metrics) for t in trials}
    rates = {i: m.error_rate for i, m in metrics.items()}
    at_results = {t.index: rates[t.index] for t in trials if t.concurrency in passing_ns}
    worst = max(at_results.values(), default=0.0)
    errors: dict[str, int] = {}
    for m in metrics.values():
        for k, v in m.errors_by_class.items():
            errors[k] = errors.get(k, 0) + v
    return _check(
        "error_rate",
        PASS if worst <= limit else FAIL,
        f"worst error rate at a reported result: {worst:.2%} (limit {limit:.2%})",
        "the error rate at every concurrency reported as a result is within the tier limit",
        {"by_trial": {str(k): v for k, v in rates.items()}, "errors_by_class": errors},
    )


def check_raw_records(trials: Sequence[TrialData]) -> dict[str, Any]:
    missing = [t.index for t in trials if not t.raw_records_key]
    return _check(
        "raw_records_stored",
        FAIL if missing else PASS,
        f"raw records of trials {missing} are missing"
        if missing
        else f"raw request records of all {len(trials)} trials are stored (sha256 checked)",
        "every trial's raw request records are in object storage before the run is done",
        {"keys": {str(t.index): t.raw_records_key for t in trials}},
    )


def check_private_test_set(run: RunEvidence) -> dict[str, Any]:
    dataset = run.dataset
    private = dataset is not None and dataset.private
    reported = (run.runner_info.get("dataset") or {}).get("sha256")
    evidence = {
        "dataset": dataset.name if dataset else None,
        "sha256": dataset.sha256 if dataset else None,
        "replayed_sha256": reported,
    }
    rule = (
        "the measured workload is the private test set whose digest is recorded (the runner "
        "reports the canonical digest of what it replayed), never the public tuning subset"
    )
    if dataset is None or not private:
        return _check(
            "private_test_set", FAIL, "the run did not use a private test set", rule, evidence
        )
    if reported is None:
        return _check(
            "private_test_set",
            WARN,
            f"{dataset.name}@{dataset.version} (private); "
            "the runner did not report the digest it replayed",
            rule,
            evidence,
        )
    if reported != dataset.sha256:
        return _check(
            "private_test_set",
            FAIL,
            f"the runner replayed {reported[:12]}…, not the recorded {dataset.sha256[:12]}…",
            rule,
            evidence,
        )
    return _check(
        "private_test_set",
        PASS,
        f"{dataset.name}@{dataset.version} (private), digest {dataset.sha256[:12]}… replayed",
        rule,
        evidence,
    )


def report_checks(
    run: RunEvidence, trials: list[TrialData], trajectories: dict[str, Trajectory] | None
) -> list[dict[str, Any]]:
    """Every check of the report, from what the run stored, its trials with raw records,
    and the dataset's trajectories."""
    spec = run.spec
    slug = spec.model.slug
    reference = load_reference(slug, simulated=spec.simulated)
    summary = run.search_summary
    result_ns = {n for n in (summary.max_agents if summary else {}).values() if n}
    claimed = spec.accelerators.used
    config = run.config
    precision = (config.get("model") or {}).get("weight_precision")
    return [
        check_qualification(run),
        check_request_accounting(trials),
        check_output_lengths(trials),
        check_token_counts(
            trials,
            expected_output_ratio=(reference or {}).get("output_tokens_per_local_token"),
        ),
        check_error_rate(run, trials),
        check_cache_honesty(trajectories, trials),
        check_cache_truth(trajectories, trials),
        check_speculative(config, trials),
        check_model_identity(run.qualification, reference, model=slug, weight_precision=precision),
        *(
            []  # a twin has no weights to degrade: quality is not a simulated figure
            if spec.simulated
            else [
                check_quality_distribution(
                    run.qualification, reference, model=slug, weight_precision=precision
                ),
                check_quality_task(run.qualification, reference, model=slug),
            ]
        ),
        check_repeatability(trials, shared_host=spec.search.shared_host),
        check_statistics(trials, result_ns),
        check_load_generator(trials),
        check_raw_records(trials),
        check_private_test_set(run),
        check_accelerators(claimed, run.telemetry, trials),
        check_power(trials),
        *(
            []  # a twin's host is not the system it stands for: nothing to inventory
            if spec.simulated
            else [
                check_inventory(
                    run.telemetry.get("inventory"),
                    config,
                    accelerator=run.accelerator,
                    accelerators_used=claimed,
                )
            ]
        ),
        *(
            # a Slurm job: every node's own inventory (docs/pipeline.md "Slurm")
            [
                check_slurm_nodes(
                    run.endpoint.get("slurm"),
                    accelerator=run.accelerator,
                    accelerators_used=claimed,
                )
            ]
            if run.endpoint.get("launcher") == "slurm"
            else []
        ),
    ]
