"""The Django admin of organizations, tokens and submissions, and of user accounts under the
one staff rule (docs/security.md "Staff"): a member of a vendor organization is never staff
(reviewer or admin), checked on the user form, on the organization's membership rows and on
every use of the admin site."""

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import UserChangeForm

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
from submissions.services.users import staff_rule_problem


class MembershipFormSet(forms.BaseInlineFormSet):
    """A staff account cannot be added to an organization (the staff rule)."""

    def clean(self) -> None:
        super().clean()
        for form in self.forms:
            data = getattr(form, "cleaned_data", None) or {}
            user = data.get("user")
            if user is None or data.get("DELETE"):
                continue
            problem = staff_rule_problem(user, member=True)
            if problem:
                form.add_error("user", problem.replace(" is a member of ", " would join ", 1))


class MembershipInline(admin.TabularInline):
    model = Membership
    formset = MembershipFormSet
    extra = 0


class StaffRuleUserChangeForm(UserChangeForm):
    """Staff status (is_staff, is_superuser) is refused for a vendor organization's member."""

    def clean(self) -> dict:
        data = super().clean()
        staff = bool(data.get("is_staff") or data.get("is_superuser"))
        problem = staff_rule_problem(self.instance, staff=staff)
        if problem:
            field = "is_superuser" if data.get("is_superuser") else "is_staff"
            if field in self.fields:
                self.add_error(field, problem)
            else:
                raise forms.ValidationError(problem)
        return data


User = get_user_model()
if admin.site.is_registered(User):
    admin.site.unregister(User)


@admin.register(User)
class StaffRuleUserAdmin(UserAdmin):
    form = StaffRuleUserChangeForm


def _staff_may_use_the_admin(request) -> bool:
    """AdminSite.has_permission, plus the staff rule: an account made before the rule (or
    outside the admin) that is staff and a vendor member is refused here too."""
    user = request.user
    if not (user.is_active and user.is_staff):
        return False
    return staff_rule_problem(user) is None


admin.site.has_permission = _staff_may_use_the_admin  # type: ignore[method-assign]


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
