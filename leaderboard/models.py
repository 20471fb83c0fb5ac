"""Published results: what the public pages show (docs/architecture.md)."""

from __future__ import annotations

import base64
import json
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.models import Q

from catalog.models import WORKLOAD_CHOICES, WORKLOAD_CODING, AIModel, HardwareSystem, SloTierSet
from leaderboard import result_documents
from leaderboard.cache import cached
from leaderboard.points import PublishedPoint, published_points
from leaderboard.result_documents import ModelledPower, Quality, TierBracket, TwinBand

if TYPE_CHECKING:
    from agentperf.engine.frontier import Point

CHART_FIELDS = (
    "label",
    "status",
    "status_reason",
    "is_simulated",
    "twin_profile",
    "workload",
    "accelerators_used",
    "accelerators_in_system",
    "max_agents",
    "brackets",
    "agents_per_accelerator",
    "agents_per_mw",
    "modelled_power",
    "quality",
    "published_at",
    "model__name",
    "model__slug",
    "hardware__name",
    "hardware__slug",
)


class ResultQuerySet(models.QuerySet):
    def public(self, *, include_simulated: bool = False) -> ResultQuerySet:
        """Published results of the benchmark's workload; simulated ones only when asked
        (they are never ranked). A ladder rung's other workload (docs/ladders.md
        "Workloads") shows on its ladder and its own page, never on a frontier."""
        qs = self.filter(status=Result.STATUS_PUBLISHED, workload=WORKLOAD_CODING)
        return qs if include_simulated else qs.filter(is_simulated=False)

    def for_listing(self) -> ResultQuerySet:
        """What tables and charts need: catalog names, no config or provenance."""
        return self.select_related("model", "hardware").defer(
            "model__sources", "hardware__sources", "hardware__peak_tflops_dense"
        )

    def for_chart(self) -> ResultQuerySet:
        """The columns charts, result tables and the API's result summary read, and the
        catalog names and slugs: no points document (charts read compact points from the
        per-result cache, `leaderboard.pages.common.chart_points`), no provenance. A page rebuild
        loads hundreds of these rows, so every column left out is decoding saved."""
        return self.select_related("model", "hardware").only(*CHART_FIELDS)


class Result(models.Model):
    """A published run: what the public pages show."""

    STATUS_PUBLISHED = "published"
    STATUS_SUPERSEDED = "superseded"
    STATUS_INVALIDATED = "invalidated"
    STATUS_CHOICES = [
        (STATUS_PUBLISHED, "published"),
        (STATUS_SUPERSEDED, "superseded"),
        (STATUS_INVALIDATED, "invalidated"),
    ]

    submission = models.OneToOneField(
        "submissions.Submission", on_delete=models.PROTECT, related_name="result"
    )
    run = models.OneToOneField("runs.BenchmarkRun", on_delete=models.PROTECT)
    model = models.ForeignKey(AIModel, on_delete=models.PROTECT, related_name="results")
    hardware = models.ForeignKey(HardwareSystem, on_delete=models.PROTECT, related_name="results")
    tier_set = models.ForeignKey(SloTierSet, on_delete=models.PROTECT)
    status = models.CharField(max_length=20, choices=STATUS_CHOICES, default=STATUS_PUBLISHED)
    status_reason = models.TextField(blank=True)
    label = models.CharField(max_length=200)
    is_simulated = models.BooleanField(default=False)
    # Simulated results only: the twin profile that served the run (launcher.simulated.profile);
    # its standing on the accuracy page (TwinAccuracy) labels the result wherever it shows.
    twin_profile = models.CharField(max_length=100, blank=True)
    # the submission's workload; only agentic coding is ranked (docs/ladders.md "Workloads")
    workload = models.CharField(max_length=32, choices=WORKLOAD_CHOICES, default=WORKLOAD_CODING)
    accelerators_used = models.PositiveIntegerField()
    accelerators_in_system = models.PositiveIntegerField(null=True, blank=True)
    # {tier name: max agents}; absent tier = never passed
    max_agents = models.JSONField(default=dict)
    # {tier name: {"highest_pass", "lowest_fail", "confirmed", "marginal", "flags"}}: the
    # search's bracket around each max agents figure (leaderboard.publishing.tier_brackets)
    brackets = models.JSONField(default=dict, blank=True)
    agents_per_accelerator = models.JSONField(default=dict)
    agents_per_mw = models.JSONField(null=True, blank=True)  # null = not measured
    # Simulated results only, labelled "modelled" wherever shown: {"label", "method",
    # "trials_modelled", "trials", "tiers": {tier: {"max_agents", "power_w", "agents_per_mw",
    # "tokens_per_joule"}}} from the simulator's power model (leaderboard.energy); null on
    # every measured result and where the profile models no power.
    modelled_power = models.JSONField(null=True, blank=True)
    # Simulated results only: the twin's band (agentperf.simulator.bands; the frontier over the
    # profile's open parameters and its fit's uncertainty, as ratios to the profile's
    # nominal frontier) and the open parameters; null for measured results and for a
    # profile without a committed band (docs/simulator.md "Bands").
    band = models.JSONField(null=True, blank=True)
    # [leaderboard.points.PublishedPoint.dump()]: read them as models with published_points
    points = models.JSONField(default=list)
    engine_name = models.CharField(max_length=50, blank=True)
    engine_version = models.CharField(max_length=100, blank=True)
    # The quality floor beside the speed (docs/verification.md "quality_distribution"):
    # {"status", "summary", "mean_kl", "top1_agreement", "class"}; {"status": "simulated"}
    # for a twin, {"status": "no_reference"} for a model without a reference deployment.
    quality = models.JSONField(default=dict, blank=True)
    dataset_sha256 = models.CharField(max_length=64, blank=True)
    # The config as the public sees it once a reviewer redacted values in it (docs/security.md
    # "Secrets in configs"); null until then: the submission's config is shown through the
    # detector's redaction (leaderboard.configview.public_config). Never served once the
    # result is invalidated or its submission withdrawn.
    public_config = models.JSONField(null=True, blank=True)
    published_at = models.DateTimeField()
    # The signed measurement receipt (docs/verification.md "Receipt"): the DSSE envelope of
    # the in-toto Statement signed at publish ({} when the platform had no signing key), and
    # of the latest status Statement (superseded / invalidated; {} while published).
    receipt = models.JSONField(default=dict, blank=True)
    receipt_status = models.JSONField(default=dict, blank=True)

    objects = ResultQuerySet.as_manager()

    class Meta:
        ordering = ["-published_at"]
        indexes = [models.Index(fields=["model", "status", "-published_at"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["published", "superseded", "invalidated"]),
                name="result_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(accelerators_used__gte=1), name="result_accelerators_positive"
            ),
        ]

    def __str__(self) -> str:
        return self.label

    @cached_property
    def twin_status(self) -> str | None:
        """A simulated result's twin standing (docs/simulator.md "Accuracy"): its profile's
        status on the accuracy page, "quarantined" for a profile the page has no row for
        (nothing checked it); None for a measured result."""
        if not self.is_simulated:
            return None
        return twin_statuses().get(self.twin_profile, TwinAccuracy.STATUS_QUARANTINED)

    @property
    def display_label(self) -> str:
        if not self.is_simulated:
            return self.label
        if self.twin_status == TwinAccuracy.STATUS_QUARANTINED:
            return f"{self.label} [simulated, quarantined twin]"
        return f"{self.label} [simulated]"

    @cached_property
    def published_points(self) -> list[PublishedPoint]:
        """``points`` as models (leaderboard/points.py), parsed once."""
        return published_points(self.points)

    @cached_property
    def tier_brackets(self) -> dict[str, TierBracket]:
        """``brackets`` as models (leaderboard/result_documents.py), parsed once."""
        return result_documents.tier_brackets(self.brackets)

    @cached_property
    def modelled(self) -> ModelledPower | None:
        """``modelled_power`` as a model, parsed once; None on a measured result."""
        return result_documents.modelled_power(self.modelled_power)

    @cached_property
    def quality_floor(self) -> Quality | None:
        """``quality`` as a model (leaderboard/result_documents.py), parsed once; None for a
        result stored without it."""
        return result_documents.quality(self.quality)

    @cached_property
    def twin_band(self) -> TwinBand | None:
        """``band`` as a model, parsed once; None without a band (docs/simulator.md "Bands")."""
        return result_documents.twin_band(self.band)

    @cached_property
    def receipt_statement(self) -> dict[str, Any] | None:
        """The in-toto Statement the receipt signed (docs/verification.md "Receipt"): the
        DSSE payload decoded, its signature unchecked (agentperf.receipt checks it); None
        without a receipt or with an unreadable one."""
        return envelope_statement(self.receipt)

    @property
    def receipt_keyid(self) -> str:
        """The id of the key that signed the receipt ("" when unsigned)."""
        signatures = (self.receipt or {}).get("signatures") or [{}]
        return str(signatures[0].get("keyid", ""))

    @cached_property
    def status_predicate(self) -> dict[str, Any] | None:
        """The predicate of the latest status Statement (superseded / invalidated); None while
        published or when unreadable."""
        statement = envelope_statement(self.receipt_status)
        return statement.get("predicate") if statement is not None else None

    def frontier_points(self) -> list[Point]:
        """The points as the engine's frontier reads them (agentperf.engine.frontier)."""
        from agentperf.engine.frontier import Point

        return [
            Point(p.concurrency, p.p25_speed, p.throughput_per_accelerator)
            for p in self.published_points
        ]


def envelope_statement(envelope: Any) -> dict[str, Any] | None:
    """The Statement a stored DSSE envelope carries, decoded (agentperf.receipt.sign wrote
    it); None when there is none or it is not a JSON object."""
    if not envelope:
        return None
    try:
        doc = json.loads(base64.b64decode(envelope["payload"]))
    except (KeyError, TypeError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


class TwinAccuracy(models.Model):
    """A twin profile against the figures it never saw: its held-out figures with their
    errors, MAPE and status (agentperf.simulator.accuracy; docs/simulator.md "Accuracy").
    Rebuilt from the committed records by ``manage.py twin_accuracy``
    (leaderboard.accuracy.twin_accuracy_rebuild)."""

    STATUS_ADMITTED = "admitted"
    STATUS_QUARANTINED = "quarantined"
    STATUS_CHOICES = [(STATUS_ADMITTED, "admitted"), (STATUS_QUARANTINED, "quarantined")]

    profile = models.CharField(max_length=100, unique=True)
    status = models.CharField(max_length=20, choices=STATUS_CHOICES)
    mape = models.FloatField(null=True, blank=True)  # null: the twin reaches no figure
    # agentperf.simulator.accuracy.ProfileAccuracy.dump()
    record = models.JSONField()
    built_at = models.DateTimeField()

    class Meta:
        ordering = ["profile"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["admitted", "quarantined"]),
                name="twin_accuracy_status_valid",
            )
        ]

    def __str__(self) -> str:
        return f"{self.profile}: {self.status}"


def twin_statuses() -> dict[str, str]:
    """{profile: status} of every twin profile, cached per generation (a rebuild of the
    accuracy page bumps it: leaderboard.accuracy)."""
    return cached(
        "twin:statuses", lambda: dict(TwinAccuracy.objects.values_list("profile", "status"))
    )
