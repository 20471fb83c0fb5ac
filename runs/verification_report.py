"""The basic verification report of a finished run (docs/verification.md).

Checks, each stored with its evidence: qualification probes, request accounting
(sent = ok + failed, raw records complete), output lengths honoured, error rate, raw
records stored, private test set used, telemetry. The report's status is the worst check.
The checks of `agentperf.verification.checks` (token counts, cache honesty, speculative
decoding, model identity, repeatability, statistics, accelerators, power) are pure
functions; this module loads what they read (raw records, the dataset, the reference) and
stores the report. docs/verification.md describes every check.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.files.storage import storages

from agentperf import contract
from agentperf.engine import rawrecords
from agentperf.engine.metrics import RequestRecord
from agentperf.engine.trajectory import Trajectory, dataset_from_bytes
from agentperf.inventory import check_inventory, check_slurm_nodes
from agentperf.verification import checks as ext
from agentperf.verification.fingerprint import load_reference
from agentperf.verification.status import FAIL, PASS, WARN, worst_status
from runs.models import BenchmarkRun, VerificationReport

log = logging.getLogger(__name__)


def _check(name: str, status: str, summary: str, rule: str, evidence: dict) -> dict[str, Any]:
    return {"name": name, "status": status, "summary": summary, "rule": rule, "evidence": evidence}


def check_qualification(run: Any) -> dict[str, Any]:
    probes = run.qualification or []
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


def check_request_accounting(run: Any, trials) -> dict[str, Any]:
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


def check_output_lengths(trials) -> dict[str, Any]:
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


def check_error_rate(run: Any, trials) -> dict[str, Any]:
    spec = contract.RunSpec.model_validate(run.run_spec)
    limit = min(t.max_error_rate for t in spec.tiers)
    summary = contract.search_summary(run.search_summary)
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


def check_raw_records(trials) -> dict[str, Any]:
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


def check_private_test_set(run: Any) -> dict[str, Any]:
    dataset = run.dataset
    private = dataset is not None and dataset.visibility == dataset.VISIBILITY_PRIVATE
    reported = ((run.runner_info or {}).get("dataset") or {}).get("sha256")
    evidence = {
        "dataset": dataset.name if dataset else None,
        "sha256": dataset.sha256 if dataset else None,
        "replayed_sha256": reported,
    }
    rule = (
        "the measured workload is the private test set whose digest is recorded (the runner "
        "reports the canonical digest of what it replayed), never the public tuning subset"
    )
    if not private:
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


def records_from_blob(blob: bytes) -> list[RequestRecord]:
    """A trial's raw request records from their stored bytes (gzip JSONL, the worker's
    ``records_blob``: runner/worker/director.py)."""
    return rawrecords.decode(blob)


def load_records(key: str) -> list[RequestRecord] | None:
    """A trial's raw request records from the artifacts storage (None when unreadable)."""
    if not key:
        return None
    try:
        with storages["artifacts"].open(key, "rb") as handle:
            return records_from_blob(handle.read())
    except Exception as exc:  # the checks say "not measured"; the report still stands
        log.warning("raw records %s unreadable: %s", key, exc)
        return None


def load_trajectories(run: BenchmarkRun) -> dict[str, Trajectory] | None:
    if run.dataset is None or not run.dataset.storage_key:
        return None
    try:
        with storages["datasets"].open(run.dataset.storage_key, "rb") as handle:
            dataset = dataset_from_bytes(handle.read(), verify=False)
    except Exception as exc:
        log.warning("dataset of run #%s unreadable: %s", run.pk, exc)
        return None
    return {t.id: t for t in dataset.trajectories}


def trial_data(trials) -> list[ext.TrialData]:
    return [
        ext.TrialData(
            index=t.index,
            concurrency=t.concurrency,
            phase=t.phase,
            metrics=t.metrics or {},
            verdicts=t.verdicts or {},
            telemetry=t.telemetry or {},
            records=load_records(t.raw_records_key),
            raw_records_key=t.raw_records_key,
            raw_records_count=t.raw_records_count,
        )
        for t in trials
    ]


def verification_checks(run: BenchmarkRun) -> list[dict[str, Any]]:
    data = trial_data(run.trials.order_by("index"))
    return report_checks(run, data, load_trajectories(run))


def report_checks(
    run: Any, trials: list[ext.TrialData], trajectories: dict[str, Trajectory] | None
) -> list[dict[str, Any]]:
    """Every check of the report, from a run (or anything with its fields: run_spec,
    search_summary, qualification, telemetry, runner_info, dataset, submission.config),
    its trials with raw records, and the dataset's trajectories."""
    spec = contract.RunSpec.model_validate(run.run_spec)  # docs/pipeline.md "The contract"
    slug = spec.model.slug
    reference = load_reference(slug, simulated=spec.simulated)
    summary = contract.search_summary(run.search_summary)
    result_ns = {n for n in (summary.max_agents if summary else {}).values() if n}
    claimed = spec.accelerators.used
    precision = ((run.submission.config or {}).get("model") or {}).get("weight_precision")
    return [
        check_qualification(run),
        check_request_accounting(run, trials),
        check_output_lengths(trials),
        ext.check_token_counts(
            trials,
            expected_output_ratio=(reference or {}).get("output_tokens_per_local_token"),
        ),
        check_error_rate(run, trials),
        ext.check_cache_honesty(trajectories, trials),
        ext.check_cache_truth(trajectories, trials),
        ext.check_speculative(run.submission.config or {}, trials),
        ext.check_model_identity(
            run.qualification or [], reference, model=slug, weight_precision=precision
        ),
        *(
            []  # a twin has no weights to degrade: quality is not a simulated figure
            if spec.simulated
            else [
                ext.check_quality_distribution(
                    run.qualification or [], reference, model=slug, weight_precision=precision
                ),
                ext.check_quality_task(run.qualification or [], reference, model=slug),
            ]
        ),
        ext.check_repeatability(trials, shared_host=spec.search.shared_host),
        ext.check_statistics(trials, result_ns),
        ext.check_load_generator(trials),
        check_raw_records(trials),
        check_private_test_set(run),
        ext.check_accelerators(claimed, run.telemetry or {}, trials),
        ext.check_power(trials),
        *(
            []  # a twin's host is not the system it stands for: nothing to inventory
            if spec.simulated
            else [
                check_inventory(
                    (run.telemetry or {}).get("inventory"),
                    run.submission.config or {},
                    accelerator=_catalog_accelerator(run),
                    accelerators_used=claimed,
                )
            ]
        ),
        *(
            # a Slurm job: every node's own inventory (docs/pipeline.md "Slurm")
            [
                check_slurm_nodes(
                    _endpoint(run).get("slurm"),
                    accelerator=_catalog_accelerator(run),
                    accelerators_used=claimed,
                )
            ]
            if _endpoint(run).get("launcher") == "slurm"
            else []
        ),
    ]


def _endpoint(run: Any) -> dict[str, Any]:
    return ((run.runner_info or {}).get("endpoint")) or {}


def _catalog_accelerator(run: Any) -> str:
    """The catalog hardware system's accelerator name ("" when unknown)."""
    hardware = getattr(run.submission, "hardware", None)
    return str(getattr(hardware, "accelerator", "") or "")


def verification_store(*, run: BenchmarkRun, checks: list[dict[str, Any]]) -> VerificationReport:
    """Store (or replace) the run's report from its computed checks; the status is the
    worst check's."""
    status = worst_status(c["status"] for c in checks)
    report, _ = VerificationReport.objects.update_or_create(
        run=run, defaults={"status": status, "checks": checks}
    )
    return report


def verification_build(*, run: BenchmarkRun) -> VerificationReport:
    """Compute and store (or replace) the run's report."""
    return verification_store(run=run, checks=verification_checks(run))
