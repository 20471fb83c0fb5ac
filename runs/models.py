"""Benchmark runs, their trials and verification reports.

The JSON documents a run and its trials store are the contract's (agentperf/contract.py,
docs/pipeline.md "The contract"); read them through the accessors, which parse each
document once per instance: ``run.spec`` (RunSpec), ``run.summary`` (SearchSummary),
``run.inventory`` (what served it), ``trial.summary`` (TrialMetrics),
``trial.tier_verdicts`` (TierVerdict per tier), ``trial.window_telemetry``
(TrialTelemetry) and ``report.results`` (CheckResult per check). A stored document does not
change after ingest, so the parsed one stays valid; the run's progress does (every
heartbeat), so ``run.last_progress`` parses it on each read. No reader outside this module
takes a stored document apart as a dict (tests/foundation/test_typed_reads.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property
from typing import Any

from django.db import models
from django.db.models import Q
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from agentperf import contract
from agentperf.inventory import Inventory
from agentperf.verification.status import FAIL, PASS, STATUSES, WARN


class BenchmarkRunQuerySet(models.QuerySet["BenchmarkRun"]):
    """The one rule for "a submission's latest run": newest first by creation, the higher id
    first when two runs share a timestamp. `submission.runs` has these methods too."""

    def latest_first(self) -> BenchmarkRunQuerySet:
        return self.order_by("-created_at", "-pk")

    def latest_for(self, submission: object) -> BenchmarkRun | None:
        """The submission's latest run in this queryset (None if it has none); filter
        first for "latest finished run": `BenchmarkRun.objects.done().latest_for(s)`."""
        return self.filter(submission=submission).latest_first().first()

    def done(self) -> BenchmarkRunQuerySet:
        return self.filter(status=BenchmarkRun.STATUS_DONE)


def latest_of(runs: Iterable[BenchmarkRun]) -> BenchmarkRun | None:
    """The latest of runs already loaded (a prefetch), by the same rule as `latest_first`:
    no query when `submission.runs.all()` is prefetched."""
    return max(runs, key=lambda r: (r.created_at, r.pk), default=None)


class BenchmarkRun(models.Model):
    STATUS_PENDING = "pending"
    STATUS_RUNNING = "running"
    STATUS_DONE = "done"
    STATUS_FAILED = "failed"
    STATUS_CANCELLED = "cancelled"
    STATUS_CHOICES = [
        (STATUS_PENDING, "pending"),
        (STATUS_RUNNING, "running"),
        (STATUS_DONE, "done"),
        (STATUS_FAILED, "failed"),
        (STATUS_CANCELLED, "cancelled"),
    ]
    FINAL_STATES = (STATUS_DONE, STATUS_FAILED, STATUS_CANCELLED)

    submission = models.ForeignKey(
        "submissions.Submission", on_delete=models.PROTECT, related_name="runs"
    )
    dataset = models.ForeignKey("catalog.Dataset", null=True, blank=True, on_delete=models.PROTECT)
    tier_set = models.ForeignKey(
        "catalog.SloTierSet", null=True, blank=True, on_delete=models.PROTECT
    )
    status = models.CharField(max_length=20, choices=STATUS_CHOICES, default=STATUS_PENDING)
    queue = models.CharField(max_length=100, blank=True)
    attempt = models.PositiveIntegerField(default=0)
    run_spec = models.JSONField(default=dict, blank=True)  # contract.RunSpec.stored()
    token_hash = models.CharField(max_length=64, blank=True, db_index=True)
    runner_host = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    progress = models.JSONField(default=dict, blank=True)
    search_summary = models.JSONField(default=dict, blank=True)  # contract.SearchSummary
    # Qualification probes run before load: [{"name", "status", "summary", "evidence"}]
    qualification = models.JSONField(default=list, blank=True)
    # Accelerator inventory and whether power was measured ({"measured": false, "reason"})
    telemetry = models.JSONField(default=dict, blank=True)
    # What the worker reported about itself: hostname, launcher, engine and package versions
    runner_info = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    soft_time_limit_s = models.PositiveIntegerField(null=True, blank=True)
    time_limit_s = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = BenchmarkRunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "heartbeat_at"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "running", "done", "failed", "cancelled"]),
                name="run_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"run #{self.pk} of submission #{self.submission_id} ({self.status})"

    @cached_property
    def spec(self) -> contract.RunSpec:
        """The stored run spec through the contract (raises for a run never dispatched)."""
        return contract.RunSpec.model_validate(self.run_spec)

    @cached_property
    def summary(self) -> contract.SearchSummary | None:
        """The search summary through the contract; None until the run completes."""
        return contract.search_summary(self.search_summary)

    @cached_property
    def runner(self) -> contract.RunnerInfo | None:
        """The worker about itself (``StartReport.runner_info``, merged over the run): its
        host and the endpoint the launcher reported; None before the run started."""
        return contract.RunnerInfo.model_validate(self.runner_info) if self.runner_info else None

    @property
    def last_progress(self) -> contract.Progress | None:
        """The worker's last progress through the contract, parsed on each read (every
        heartbeat rewrites it); None before the first."""
        return contract.Progress.model_validate(self.progress) if self.progress else None

    @cached_property
    def inventory(self) -> Inventory | dict[str, Any] | None:
        """What served the run as the runner recorded it with its completion
        (``CompletionReport.telemetry.inventory``, agentperf/inventory.py): the model, or
        the document as stored where an older runner stored another shape; None when the
        runner recorded none (docs/verification.md "inventory")."""
        stored = self.telemetry.get("inventory") if isinstance(self.telemetry, dict) else None
        if not stored:
            return None
        try:
            return Inventory.model_validate(stored)
        except ValidationError:
            return dict(stored)


class Trial(models.Model):
    """One trial at one concurrency; stored as soon as it finishes so a run can resume."""

    run = models.ForeignKey(BenchmarkRun, on_delete=models.CASCADE, related_name="trials")
    index = models.PositiveIntegerField()
    concurrency = models.PositiveIntegerField()
    phase = models.CharField(max_length=20, blank=True)  # ramp / bisect / confirm / repeat
    window_start_s = models.FloatField(null=True, blank=True)
    window_end_s = models.FloatField(null=True, blank=True)
    metrics = models.JSONField(default=dict)  # contract.TrialMetrics: read trial.summary
    # {tier name: contract.TierVerdict} ({"passed", "reasons", "ttft_s", "marginal"}): read
    # trial.tier_verdicts
    verdicts = models.JSONField(default=dict)
    raw_records_key = models.CharField(max_length=500, blank=True)
    raw_records_sha256 = models.CharField(max_length=64, blank=True)
    raw_records_count = models.PositiveIntegerField(default=0)
    # Mean power over the window etc.; {"measured": false, "reason": ...} when not measured
    telemetry = models.JSONField(default=dict, blank=True)  # contract.TrialTelemetry: read
    # trial.window_telemetry
    attempt = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "index"]
        constraints = [
            models.UniqueConstraint(fields=["run", "index"], name="trial_run_index"),
            models.CheckConstraint(condition=Q(concurrency__gte=1), name="trial_concurrency"),
        ]

    def __str__(self) -> str:
        return f"trial {self.index} @ N={self.concurrency}"

    @cached_property
    def summary(self) -> contract.TrialMetrics:
        """The trial's metrics through the contract, parsed once."""
        return contract.trial_metrics(self.metrics)

    @cached_property
    def tier_verdicts(self) -> dict[str, contract.TierVerdict]:
        """The trial's verdict per tier through the contract, parsed once."""
        return contract.trial_verdicts(self.verdicts)

    @cached_property
    def window_telemetry(self) -> contract.TrialTelemetry:
        """The window's telemetry (power, the server's /metrics) through the contract, parsed
        once."""
        return contract.TrialTelemetry.model_validate(self.telemetry)


class CheckResult(BaseModel):
    """One check of a stored verification report (agentperf.verification ``result()``):
    its name, status, summary, rule and evidence. The evidence is the check's own
    (docs/verification.md has each); the ones the public pages read have a model here."""

    name: str
    status: str = ""
    summary: str = ""
    rule: str = ""
    evidence: dict[str, Any] = Field(default_factory=dict)

    def quality(self) -> QualityEvidence:
        """The evidence of ``quality_distribution``."""
        return QualityEvidence.model_validate(self.evidence)

    def inventory(self) -> InventoryEvidence:
        """The evidence of ``inventory``."""
        return InventoryEvidence.model_validate(self.evidence)


class QualityLimits(BaseModel):
    class_: str | None = Field(default=None, alias="class")


class QualityEvidence(BaseModel):
    """``quality_distribution``'s evidence (docs/verification.md "quality_distribution"):
    mean KL and top-1 agreement against the reference deployment, within the limits of the
    deployment's precision class."""

    mean_kl: float | None = None
    top1_agreement: float | None = None
    limits: QualityLimits | None = None
    deployment: Any = None  # the reference deployment, as its record names it


class InventoryEvidence(BaseModel):
    """``inventory``'s evidence: what differs between the inventory and the config."""

    mismatches: list[str] = Field(default_factory=list)


CHECKS: TypeAdapter[list[CheckResult]] = TypeAdapter(list[CheckResult])


class VerificationReport(models.Model):
    STATUS_PASS, STATUS_WARN, STATUS_FAIL = PASS, WARN, FAIL
    STATUS_CHOICES = [(s, s) for s in STATUSES]

    run = models.OneToOneField(BenchmarkRun, on_delete=models.CASCADE, related_name="verification")
    status = models.CharField(max_length=10, choices=STATUS_CHOICES)
    # [{"name", "status", "summary", "rule", "evidence": {...}}]
    checks = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=list(STATUSES)), name="verification_status"
            ),
        ]

    def __str__(self) -> str:
        return f"verification of run #{self.run_id}: {self.status}"

    @cached_property
    def results(self) -> list[CheckResult]:
        """The stored checks as models, parsed once."""
        return CHECKS.validate_python(self.checks or [])

    def result(self, name: str) -> CheckResult | None:
        """The check called ``name``; None when the report has none."""
        return next((c for c in self.results if c.name == name), None)
