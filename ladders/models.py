"""A ladder: a baseline plus ordered named changes, each rung a run under identical
conditions, and the attribution of the gain to each change (docs/ladders.md)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from submissions.stored_config import StoredConfig, read_config


class Ladder(models.Model):
    STATUS_RUNNING = "running"  # rungs on their way through the pipeline
    STATUS_IN_REVIEW = "in_review"  # every rung verified; attribution computed
    STATUS_PUBLISHED = "published"
    STATUS_REJECTED = "rejected"
    STATUS_FAILED = "failed"  # a rung failed or was withdrawn/rejected on its own
    STATUS_CHOICES = [
        (STATUS_RUNNING, "running"),
        (STATUS_IN_REVIEW, "in review"),
        (STATUS_PUBLISHED, "published"),
        (STATUS_REJECTED, "rejected"),
        (STATUS_FAILED, "failed"),
    ]
    SOURCE_PLATFORM = "platform"  # every rung a run of this platform
    SOURCE_ENGINE = "engine"  # imported ladder.json of `python -m agentperf.engine ladder`
    SOURCE_CHOICES = [(SOURCE_PLATFORM, "platform runs"), (SOURCE_ENGINE, "engine ladder")]

    org = models.ForeignKey(
        "submissions.Organization", on_delete=models.PROTECT, related_name="ladders"
    )
    model = models.ForeignKey("catalog.AIModel", on_delete=models.PROTECT)
    hardware = models.ForeignKey("catalog.HardwareSystem", on_delete=models.PROTECT)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    source = models.CharField(max_length=20, choices=SOURCE_CHOICES, default=SOURCE_PLATFORM)
    is_simulated = models.BooleanField(default=False)
    status = models.CharField(max_length=20, choices=STATUS_CHOICES, default=STATUS_RUNNING)
    status_reason = models.TextField(blank=True)
    # the submitted body (baseline, rungs, orders, speeds) as validated
    document = models.JSONField(default=dict)
    orders = models.JSONField(default=list)
    speeds = models.JSONField(default=list)
    # ladder.json (agentperf.ladder.attribute.ladder_document), once every rung is verified
    attribution = models.JSONField(null=True, blank=True)
    # per rung digest: the trials' points, limits and session-bootstrap replicates, so a
    # reader's speed is attributed without reading raw records again
    measurements = models.JSONField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="reviewed_ladders",
    )
    published_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"ladder #{self.pk} {self.name}"


class LadderRung(models.Model):
    """One rung of one order: the config with the changes applied, and the submission
    whose run measures it (shared by rungs, or reused from earlier, when digests match)."""

    ladder = models.ForeignKey(Ladder, on_delete=models.CASCADE, related_name="rungs")
    order = models.CharField(max_length=20, default="forward")
    index = models.PositiveIntegerField()
    name = models.CharField(max_length=200)
    description = models.CharField(max_length=500, blank=True)
    change = models.IntegerField(null=True, blank=True)  # index into document["rungs"]
    applied = models.JSONField(default=list)
    config = models.JSONField(default=dict)
    config_sha256 = models.CharField(max_length=64)
    submission = models.ForeignKey(
        "submissions.Submission", on_delete=models.PROTECT, related_name="ladder_rungs"
    )
    reused = models.BooleanField(default=False)  # an earlier verified run of the same config

    class Meta:
        ordering = ["ladder", "order", "index"]
        constraints = [
            models.UniqueConstraint(fields=["ladder", "order", "index"], name="ladder_rung_unique")
        ]

    def __str__(self) -> str:
        return f"{self.ladder_id}/{self.order}/{self.index} {self.name}"

    @property
    def deployment(self) -> StoredConfig:
        """The rung's config as a model (submissions/stored_config.py)."""
        return read_config(self.config)
