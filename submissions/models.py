"""Organizations, tokens, submissions and their audit trail, stored artifacts."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from catalog.models import WORKLOAD_CHOICES, WORKLOAD_CODING, WORKLOADS
from submissions import constants as c
from submissions.stored_config import StoredConfig, read_config


class Organization(models.Model):
    name = models.CharField(max_length=200, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    ROLE_ADMIN = "admin"
    ROLE_MEMBER = "member"
    ROLE_CHOICES = [(ROLE_ADMIN, "admin"), (ROLE_MEMBER, "member")]

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=ROLE_CHOICES, default=ROLE_MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "org"], name="membership_user_org"),
            models.CheckConstraint(condition=Q(role__in=["admin", "member"]), name="member_role"),
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.org} ({self.role})"


class ApiToken(models.Model):
    """A vendor API token. Only a SHA-256 of the secret is stored; the token is shown once."""

    SCOPE_SUBMIT = "submit"
    SCOPE_READ = "read"
    ALL_SCOPES = (SCOPE_SUBMIT, SCOPE_READ)

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.org} / {self.name} ({self.prefix}…)"


class Submission(models.Model):
    org = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="submissions")
    model = models.ForeignKey("catalog.AIModel", on_delete=models.PROTECT)
    hardware = models.ForeignKey("catalog.HardwareSystem", on_delete=models.PROTECT)
    config = models.JSONField(default=dict)
    config_text = models.TextField(blank=True)
    config_sha256 = models.CharField(max_length=64, blank=True)
    schema_version = models.PositiveSmallIntegerField(default=1)
    source = models.CharField(max_length=20, choices=c.SOURCE_CHOICES, default=c.SOURCE_VENDOR)
    status = models.CharField(max_length=20, choices=c.STATUS_CHOICES, default=c.DRAFT)
    status_reason = models.TextField(blank=True)
    status_changed_at = models.DateTimeField(null=True, blank=True)
    baseline = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    previous = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="resubmissions"
    )
    # null, not "", so the partial unique constraint ignores submissions without a key
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    is_simulated = models.BooleanField(default=False)
    # what the run replays; only a ladder rung asks for another than agentic coding
    # (docs/ladders.md "Workloads")
    workload = models.CharField(max_length=32, choices=WORKLOAD_CHOICES, default=WORKLOAD_CODING)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "-created_at"])]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=c.ALL_STATES), name="submission_status"),
            models.CheckConstraint(condition=Q(workload__in=WORKLOADS), name="submission_workload"),
            models.CheckConstraint(
                condition=Q(source__in=[c.SOURCE_VENDOR, c.SOURCE_OPERATOR]),
                name="submission_source",
            ),
            models.UniqueConstraint(
                fields=["org", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="submission_idempotency_key",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.org} {self.model} on {self.hardware} ({self.status})"

    @property
    def is_final(self) -> bool:
        return self.status in c.FINAL_STATES

    @property
    def deployment(self) -> StoredConfig:
        """The stored config as a model (submissions/stored_config.py); raises
        StoredConfigError for a stored document no schema produced."""
        return read_config(self.config)


class AuditEvent(models.Model):
    """Who did what to which object and why. Never deleted."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_label = models.CharField(max_length=200, help_text="user, token or system component")
    object_type = models.CharField(max_length=50)
    object_id = models.CharField(max_length=50)
    action = models.CharField(max_length=50)
    from_state = models.CharField(max_length=30, blank=True)
    to_state = models.CharField(max_length=30, blank=True)
    reason = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["object_type", "object_id"])]

    def __str__(self) -> str:
        return f"{self.object_type}#{self.object_id} {self.from_state}→{self.to_state}"


class Artifact(models.Model):
    """A stored object (raw records, logs, configs, attachments, datasets)."""

    KIND_RAW_RECORDS = "raw_records"
    KIND_LOG = "log"
    KIND_CONFIG = "config"
    KIND_ATTACHMENT = "attachment"
    KIND_DATASET = "dataset"
    KIND_REPORT = "report"
    KIND_CHOICES = [
        (KIND_RAW_RECORDS, "raw request records"),
        (KIND_LOG, "log"),
        (KIND_CONFIG, "config"),
        (KIND_ATTACHMENT, "attachment"),
        (KIND_DATASET, "dataset"),
        (KIND_REPORT, "report"),
    ]

    kind = models.CharField(max_length=20, choices=KIND_CHOICES)
    storage_key = models.CharField(max_length=500, unique=True)
    sha256 = models.CharField(max_length=64)
    size = models.PositiveBigIntegerField()
    content_type = models.CharField(max_length=100, default="application/octet-stream")
    org = models.ForeignKey(
        Organization, null=True, blank=True, on_delete=models.PROTECT, related_name="artifacts"
    )
    run = models.ForeignKey(
        "runs.BenchmarkRun",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="artifacts",
    )
    submission = models.ForeignKey(
        Submission,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="artifacts",
        help_text="the submission an attachment belongs to",
    )
    name = models.CharField(max_length=200, blank=True, help_text="file name given by the uploader")
    # Presigned uploads are recorded first with the size and sha256 the uploader declared;
    # this is set once the stored bytes were checked against them.
    verified_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    kind__in=["raw_records", "log", "config", "attachment", "dataset", "report"]
                ),
                name="artifact_kind",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind}: {self.storage_key}"


class Notification(models.Model):
    """A message to a vendor organization's members, shown in the portal (and e-mailed)."""

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="notifications")
    submission = models.ForeignKey(
        Submission, null=True, blank=True, on_delete=models.CASCADE, related_name="notifications"
    )
    action = models.CharField(max_length=50)
    subject = models.CharField(max_length=300)
    body = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["org", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.org}: {self.subject}"


class PoolEndpoint(models.Model):
    """An allowlisted endpoint of a hardware pool: what an `attached` config may name.

    Operators register these; a vendor config gives only `endpoint_id`, so no free URL from
    a request ever reaches a runner. The API key, if any, stays on the runner host: only the
    name of the environment variable that holds it is stored here.
    """

    pool = models.SlugField(max_length=100, help_text="HardwareSystem.runner_pool")
    endpoint_id = models.SlugField(max_length=100)
    url = models.URLField(max_length=500, help_text="OpenAI-compatible base URL, e.g. …/v1")
    api_key_env = models.CharField(
        max_length=100, blank=True, help_text="env variable on the runner host holding the key"
    )
    org = models.ForeignKey(
        Organization,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="pool_endpoints",
        help_text="only this organization may name it; empty = any organization",
    )
    enabled = models.BooleanField(default=True)
    description = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pool", "endpoint_id"]
        constraints = [
            models.UniqueConstraint(fields=["pool", "endpoint_id"], name="pool_endpoint_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.pool}/{self.endpoint_id}"


class RunnerPool(models.Model):
    """A hardware pool (HardwareSystem.runner_pool) and who operates its runner hosts.

    A platform pool (no operator organization) runs a vendor's launched process only after a
    reviewer approved that exact launch; a vendor-operated pool runs only its operator's
    submissions, without approval (docs/security.md "Vendor commands"). A pool with no row
    here is treated as platform-operated.
    """

    slug = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200, blank=True)
    operator_org = models.ForeignKey(
        Organization,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="operated_pools",
        help_text="the vendor organization that operates this pool; empty = the platform",
    )
    description = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        who = self.operator_org.name if self.operator_org_id else "platform"
        return f"{self.slug} ({who})"

    @property
    def vendor_operated(self) -> bool:
        return self.operator_org_id is not None


class LaunchApproval(models.Model):
    """A reviewer's approval of one exact process launch (command, arguments, environment
    names and values, port, image digest) of one organization on one platform pool.
    Re-runs of the same launch reuse it; any change to the launch has another digest."""

    pool = models.SlugField(max_length=100)
    org = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="launch_approvals")
    launch_sha256 = models.CharField(max_length=64)
    launch = models.JSONField(help_text="the canonical launch the digest covers")
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField()
    submission = models.ForeignKey(
        Submission, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["pool", "org", "launch_sha256"],
                condition=Q(revoked_at__isnull=True),
                name="launch_approval_unique_live",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.pool}/{self.org} launch {self.launch_sha256[:12]}"
