"""Runs in the Django admin, with a per-run review that goes through the review services
(`review.services`): change permission here, then the same rules as the console
(staff outside the submitting organization, a reason, the vendor notified)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from review.services import ReviewError, review_publish, review_reject
from runs.models import BenchmarkRun, Trial, VerificationReport
from submissions import constants as c


class TrialInline(admin.TabularInline):
    model = Trial
    extra = 0
    fields = ("index", "concurrency", "phase", "attempt", "raw_records_key", "raw_records_count")
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class ReviewForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve and publish"), ("reject", "Reject")])
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Required; the vendor reads it and the audit trail keeps it.",
    )
    label = forms.CharField(
        required=False, max_length=200, help_text='Result label, e.g. "GB300 now (28 Oct)"'
    )


@admin.register(BenchmarkRun)
class BenchmarkRunAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "submission",
        "status",
        "submission_status",
        "queue",
        "attempt",
        "heartbeat_at",
        "review_link",
    )
    list_filter = ("status", "queue")
    readonly_fields = ("token_hash",)
    inlines = [TrialInline]
    # No bulk publish: every decision is one run, read, with its own reason.
    actions = None

    @admin.display(description="submission status")
    def submission_status(self, obj: BenchmarkRun) -> str:
        return obj.submission.status

    @admin.display(description="review")
    def review_link(self, obj: BenchmarkRun) -> str:
        if obj.status != BenchmarkRun.STATUS_DONE or obj.submission.status != c.IN_REVIEW:
            return "—"
        url = reverse("admin:runs_benchmarkrun_review", args=[obj.pk])
        return format_html('<a href="{}">review</a>', url)

    def get_urls(self):
        return [
            path(
                "<int:run_id>/review/",
                self.admin_site.admin_view(self.review_view),
                name="runs_benchmarkrun_review",
            ),
            *super().get_urls(),
        ]

    def review_view(self, request: HttpRequest, run_id: int):
        if not self.has_change_permission(request):
            raise PermissionDenied("reviewing a run needs the change permission on runs")
        run = get_object_or_404(BenchmarkRun.objects.select_related("submission"), pk=run_id)
        form = ReviewForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            submission = run.submission
            try:
                if data["decision"] == "approve":
                    result = review_publish(
                        submission=submission,
                        actor=request.user,
                        reason=data["reason"],
                        label=data["label"] or None,
                    )
                    self.message_user(request, f"Published result #{result.pk}: {result.label}")
                else:
                    review_reject(submission=submission, actor=request.user, reason=data["reason"])
                    self.message_user(request, f"Rejected submission #{run.submission_id}")
                return HttpResponseRedirect(reverse("admin:runs_benchmarkrun_changelist"))
            except ReviewError as exc:
                self.message_user(request, str(exc), level=messages.ERROR)
        report = VerificationReport.objects.filter(run=run).first()
        context = {
            **self.admin_site.each_context(request),
            "title": f"Review run #{run.pk}",
            "run": run,
            "report": report,
            "trials": run.trials.order_by("index"),
            "form": form,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/runner/benchmarkrun/review.html", context)


@admin.register(VerificationReport)
class VerificationReportAdmin(admin.ModelAdmin):
    list_display = ("run", "status", "created_at")
