from django.contrib import admin

from runner.models import BenchmarkRun, Trial, VerificationReport


class TrialInline(admin.TabularInline):
    model = Trial
    extra = 0
    fields = ("index", "concurrency", "phase", "raw_records_key")
    readonly_fields = fields


@admin.register(BenchmarkRun)
class BenchmarkRunAdmin(admin.ModelAdmin):
    list_display = ("id", "submission", "status", "queue", "attempt", "heartbeat_at")
    list_filter = ("status", "queue")
    readonly_fields = ("token_hash",)
    inlines = [TrialInline]


@admin.register(VerificationReport)
class VerificationReportAdmin(admin.ModelAdmin):
    list_display = ("run", "status", "created_at")
