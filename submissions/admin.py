from django.contrib import admin

from submissions.models import (
    ApiToken,
    Artifact,
    AuditEvent,
    Membership,
    Notification,
    Organization,
    PoolEndpoint,
    Submission,
)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "created_at")
    inlines = [MembershipInline]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("org", "name", "prefix", "expires_at", "revoked_at", "last_used_at")
    readonly_fields = ("prefix", "secret_hash", "last_used_at")
    exclude = ()


@admin.register(Submission)
class SubmissionAdmin(admin.ModelAdmin):
    list_display = ("id", "org", "model", "hardware", "status", "source", "created_at")
    list_filter = ("status", "source", "org", "hardware")
    readonly_fields = ("status", "status_reason", "status_changed_at", "config_sha256")


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = (
        "created_at",
        "actor_label",
        "object_type",
        "object_id",
        "from_state",
        "to_state",
    )
    list_filter = ("object_type", "action")

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Artifact)
class ArtifactAdmin(admin.ModelAdmin):
    list_display = ("kind", "storage_key", "size", "sha256", "created_at")
    list_filter = ("kind",)


@admin.register(PoolEndpoint)
class PoolEndpointAdmin(admin.ModelAdmin):
    """The allowlist `attached` configs choose from (URL + the key's env var name only)."""

    list_display = ("pool", "endpoint_id", "url", "org", "enabled", "created_at")
    list_filter = ("pool", "enabled")


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ("created_at", "org", "submission", "action", "subject", "read_at")
    list_filter = ("action", "org")
