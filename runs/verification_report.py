"""The verification report of a finished run, stored (docs/verification.md): this module
only loads what the checks read (the run's stored documents as `RunEvidence`, each trial's
raw records, the dataset's trajectories) and stores the report; every check, the report's
own included, lives in `agentperf.verification` (`report.report_checks`). The report's
status is the worst check's.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.files.storage import storages

from agentperf import contract
from agentperf.engine import rawrecords
from agentperf.engine.metrics import RequestRecord
from agentperf.engine.trajectory import Trajectory, dataset_from_bytes
from agentperf.verification import checks as ext
from agentperf.verification.report import DatasetEvidence, RunEvidence, report_checks
from agentperf.verification.status import worst_status
from runs.models import CHECKS, BenchmarkRun, VerificationReport

log = logging.getLogger(__name__)


def load_records(key: str) -> list[RequestRecord] | None:
    """A trial's raw request records from the artifacts storage (None when unreadable)."""
    if not key:
        return None
    try:
        with storages["artifacts"].open(key, "rb") as handle:
            return rawrecords.decode(handle.read())
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
    return report_checks(run_evidence(run), data, load_trajectories(run))


def run_evidence(run: BenchmarkRun) -> RunEvidence:
    """What the run stored, as the report's checks read it (agentperf.verification.report)."""
    dataset = run.dataset
    hardware = run.submission.hardware
    return RunEvidence(
        spec=run.spec,  # docs/pipeline.md "The contract"
        search_summary=contract.search_summary(run.search_summary),
        qualification=list(run.qualification or []),
        telemetry=dict(run.telemetry or {}),
        runner_info=dict(run.runner_info or {}),
        dataset=None
        if dataset is None
        else DatasetEvidence(
            name=dataset.name,
            version=dataset.version,
            sha256=dataset.sha256,
            private=dataset.visibility == dataset.VISIBILITY_PRIVATE,
        ),
        config=dict(run.submission.config or {}),
        accelerator=str(getattr(hardware, "accelerator", "") or ""),
    )


def verification_store(*, run: BenchmarkRun, checks: list[dict[str, Any]]) -> VerificationReport:
    """Store (or replace) the run's report from its computed checks; the status is the
    worst check's."""
    status = worst_status(check.status for check in CHECKS.validate_python(checks))
    report, _ = VerificationReport.objects.update_or_create(
        run=run, defaults={"status": status, "checks": checks}
    )
    return report


def verification_build(*, run: BenchmarkRun) -> VerificationReport:
    """Compute and store (or replace) the run's report."""
    return verification_store(run=run, checks=verification_checks(run))
