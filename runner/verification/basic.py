"""The basic verification report of a finished run (DESIGN.md §4 "Verification").

Checks, each stored with its evidence: qualification probes, request accounting
(sent = ok + failed, raw records complete), output lengths honoured, error rate, raw
records stored, private test set used, telemetry. The report's status is the worst check.
Later work adds output fingerprints and telemetry consistency against the config.
"""

from __future__ import annotations

from typing import Any

from runner.models import BenchmarkRun, VerificationReport

PASS, WARN, FAIL = "pass", "warn", "fail"
_RANK = {PASS: 0, WARN: 1, FAIL: 2}


def _check(name: str, status: str, summary: str, rule: str, evidence: dict) -> dict[str, Any]:
    return {"name": name, "status": status, "summary": summary, "rule": rule,
            "evidence": evidence}  # fmt: skip


def check_qualification(run: BenchmarkRun) -> dict[str, Any]:
    probes = run.qualification or []
    if not probes:
        return _check("qualification", FAIL, "no qualification probes were reported",
                      "the runner probes the endpoint before load", {})  # fmt: skip
    worst = max((p.get("status", FAIL) for p in probes), key=lambda s: _RANK.get(s, 2))
    failed = [p["name"] for p in probes if p.get("status") != PASS]
    summary = (
        f"all {len(probes)} probes passed"
        if not failed
        else f"{len(probes) - len(failed)} of {len(probes)} probes passed; not: {', '.join(failed)}"
    )
    return _check(
        "qualification", worst, summary,
        "claimed model served, streaming, exact output length with ignore_eos, usage and "
        "cached tokens reported",
        {"probes": [{k: p.get(k) for k in ("name", "status", "summary")} for p in probes]},
    )  # fmt: skip


def check_request_accounting(run: BenchmarkRun, trials) -> dict[str, Any]:
    bad = []
    rows = []
    for t in trials:
        m = t.metrics or {}
        sent, ok, failed = m.get("requests"), m.get("ok"), m.get("failed")
        total = m.get("requests_total")
        row = {"trial": t.index, "sent": sent, "ok": ok, "failed": failed,
               "records_total": total, "raw_records": t.raw_records_count}  # fmt: skip
        rows.append(row)
        if None in (sent, ok, failed) or sent != ok + failed:
            bad.append(f"trial {t.index}: sent {sent} != ok {ok} + failed {failed}")
        elif total is not None and t.raw_records_count != total:
            bad.append(f"trial {t.index}: {t.raw_records_count} raw records, {total} requests")
    return _check(
        "request_accounting", FAIL if bad else PASS,
        "; ".join(bad[:5]) if bad else f"sent = ok + failed in all {len(rows)} trials, and "
        "every request has its raw record",
        "per trial: requests sent in the window = ok + failed; raw records = all requests",
        {"trials": rows},
    )  # fmt: skip


def check_output_lengths(trials) -> dict[str, Any]:
    wrong = {t.index: (t.metrics or {}).get("errors_by_class", {}).get("wrong_length", 0)
             for t in trials}  # fmt: skip
    total = sum(wrong.values())
    sent = sum((t.metrics or {}).get("requests", 0) or 0 for t in trials)
    status = PASS if total == 0 else (WARN if sent and total / sent <= 0.001 else FAIL)
    return _check(
        "output_lengths", status,
        "every answer had exactly the requested length" if total == 0
        else f"{total} of {sent} requests returned another length than requested",
        "completion_tokens == max_tokens (ignore_eos) for every request",
        {"wrong_length_by_trial": {str(k): v for k, v in wrong.items() if v}},
    )  # fmt: skip


def check_error_rate(run: BenchmarkRun, trials) -> dict[str, Any]:
    limit = min((t.get("max_error_rate", 0.01) for t in run.run_spec.get("tiers") or []),
                default=0.01)  # fmt: skip
    max_agents = (run.search_summary or {}).get("max_agents") or {}
    passing_ns = {n for n in max_agents.values() if n}
    rates = {t.index: (t.metrics or {}).get("error_rate", 0.0) or 0.0 for t in trials}
    at_results = {t.index: rates[t.index] for t in trials if t.concurrency in passing_ns}
    worst = max(at_results.values(), default=0.0)
    errors: dict[str, int] = {}
    for t in trials:
        for k, v in ((t.metrics or {}).get("errors_by_class") or {}).items():
            errors[k] = errors.get(k, 0) + int(v)
    return _check(
        "error_rate", PASS if worst <= limit else FAIL,
        f"worst error rate at a reported result: {worst:.2%} (limit {limit:.2%})",
        "the error rate at every concurrency reported as a result is within the tier limit",
        {"by_trial": {str(k): v for k, v in rates.items()}, "errors_by_class": errors},
    )  # fmt: skip


def check_raw_records(trials) -> dict[str, Any]:
    missing = [t.index for t in trials if not t.raw_records_key]
    return _check(
        "raw_records_stored", FAIL if missing else PASS,
        f"raw records of trials {missing} are missing" if missing
        else f"raw request records of all {len(trials)} trials are stored (sha256 checked)",
        "every trial's raw request records are in object storage before the run is done",
        {"keys": {str(t.index): t.raw_records_key for t in trials}},
    )  # fmt: skip


def check_private_test_set(run: BenchmarkRun) -> dict[str, Any]:
    dataset = run.dataset
    private = dataset is not None and dataset.visibility == dataset.VISIBILITY_PRIVATE
    return _check(
        "private_test_set", PASS if private else FAIL,
        f"{dataset.name}@{dataset.version} (private)" if private
        else "the run did not use a private test set",
        "the measured workload is the private test set, never the public tuning subset",
        {"dataset": dataset.name if dataset else None,
         "sha256": dataset.sha256 if dataset else None},
    )  # fmt: skip


def check_telemetry(run: BenchmarkRun) -> dict[str, Any]:
    telemetry = run.telemetry or {}
    if telemetry.get("measured"):
        accels = telemetry.get("accelerators") or []
        used = (run.run_spec.get("accelerators") or {}).get("used")
        status = PASS if used is None or len(accels) >= int(used) else WARN
        return _check(
            "telemetry", status,
            f"{len(accels)} accelerators reported by {telemetry.get('tool')}; {used} claimed used",
            "accelerator count and type on the runner host match the config",
            {"accelerators": accels},
        )  # fmt: skip
    return _check(
        "telemetry", WARN, telemetry.get("reason") or "not measured",
        "power and accelerators are measured where a tool exists; never estimated",
        {},
    )  # fmt: skip


def verification_checks(run: BenchmarkRun) -> list[dict[str, Any]]:
    trials = list(run.trials.order_by("index"))
    return [
        check_qualification(run),
        check_request_accounting(run, trials),
        check_output_lengths(trials),
        check_error_rate(run, trials),
        check_raw_records(trials),
        check_private_test_set(run),
        check_telemetry(run),
    ]


def verification_build(*, run: BenchmarkRun) -> VerificationReport:
    """Compute and store (or replace) the run's report."""
    checks = verification_checks(run)
    status = max((c["status"] for c in checks), key=lambda s: _RANK[s])
    report, _ = VerificationReport.objects.update_or_create(
        run=run, defaults={"status": status, "checks": checks}
    )
    return report
