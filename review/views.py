"""The review console: staff pages for deciding on submissions (not the Django admin)."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from leaderboard.configdiff import config_diff, diff_summary
from leaderboard.configview import redact
from leaderboard.loadgen import load_generator_table
from leaderboard.models import Result
from leaderboard.pages.result import timeline_trials
from review import presenters, selectors
from review.forms import DecisionForm, QueueFilterForm, decision_form
from review.services import (
    ACTIONS,
    ReviewError,
    ReviewForbidden,
    review_act,
    review_available_actions,
    review_conflict,
)
from runs.models import BenchmarkRun, Trial, VerificationReport
from submissions.models import Artifact, Submission
from submissions.services.artifacts import artifact_url
from submissions.services.users import staff_rule_problem

logger = logging.getLogger(__name__)


def staff_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Anonymous users go to the login page; signed-in non-staff users get 403."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user = request.user
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not (user.is_active and user.is_staff):
            raise PermissionDenied("the review console is for reviewers only")
        problem = staff_rule_problem(user)  # a vendor member is never a reviewer
        if problem:
            raise PermissionDenied(problem)
        return view(request, *args, **kwargs)

    return wrapper


@require_GET
@staff_required
def queue(request: HttpRequest) -> HttpResponse:
    data = request.GET.copy()
    if "state" not in data:
        data["state"] = selectors.DEFAULT_QUEUE_STATE
    form = QueueFilterForm(data)
    filters = form.cleaned_data if form.is_valid() else {"state": selectors.DEFAULT_QUEUE_STATE}
    filters = {k: filters.get(k) or "" for k in ("state", "org", "hardware", "model", "age")}
    submissions = selectors.review_queue(**filters)
    page = Paginator(submissions, 50).get_page(request.GET.get("page"))
    others = {k: v for k, v in filters.items() if k != "state"}
    counts = selectors.review_state_counts(**others)
    # A reviewer's own organizations: their submissions are marked, and refused on action.
    conflicts = set(request.user.memberships.values_list("org_id", flat=True))
    return render(
        request,
        "review/queue.html",
        {
            "form": form,
            "page": page,
            "filters": filters,
            "counts": counts,
            "total": sum(row["count"] for row in counts),
            "other_query": urlencode({k: v for k, v in others.items() if v}),
            "conflict_org_ids": conflicts,
        },
    )


@require_GET
@staff_required
def submission_detail(request: HttpRequest, pk: int) -> HttpResponse:
    submission = get_object_or_404(_submissions(), pk=pk)
    run = submission.runs.latest_first().first()
    return render(request, "review/detail.html", _detail_context(request, submission, run))


@require_GET
@staff_required
def run_detail(request: HttpRequest, run_pk: int) -> HttpResponse:
    run = get_object_or_404(BenchmarkRun, pk=run_pk)
    submission = get_object_or_404(_submissions(), pk=run.submission_id)
    return render(request, "review/detail.html", _detail_context(request, submission, run))


@require_POST
@staff_required
def decide(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    submission = get_object_or_404(_submissions(), pk=pk)
    if action not in ACTIONS:
        return HttpResponse(f"unknown action {action!r}", status=404, content_type="text/plain")
    form = decision_form(action, submission, request.POST)
    if not form.is_valid():
        return _detail_error(request, submission, action, form, status=400)
    try:
        review_act(
            action=action,
            submission=submission,
            actor=request.user,
            reason=form.cleaned_data["reason"],
            label=form.cleaned_data.get("label"),
            paths=form.cleaned_data.get("paths"),
        )
    except ReviewForbidden as exc:
        raise PermissionDenied(str(exc)) from exc
    except ReviewError as exc:
        form.add_error(None, str(exc))
        return _detail_error(request, submission, action, form, status=409)
    messages.success(request, f"Submission #{submission.pk}: {ACTIONS[action].done}.")
    return redirect("review:submission", pk=submission.pk)


def _submissions():
    return Submission.objects.select_related("org", "model", "hardware", "previous")


def _detail_error(
    request: HttpRequest, submission: Submission, action: str, form: DecisionForm, status: int
) -> HttpResponse:
    run = submission.runs.latest_first().first()
    context = _detail_context(request, submission, run, bound={action: form})
    available = {item["spec"].name for item in context["action_forms"]}
    if action not in available:
        # The form is not on the page any more (the state moved on): say why at the top.
        context["decision_errors"] = [*form.non_field_errors(), *form.errors.get("reason", [])]
    return render(request, "review/detail.html", context, status=status)


def _tiers_for(run: BenchmarkRun | None) -> list[dict[str, Any]]:
    if run is None:
        return []
    if run.tier_set_id:
        return run.tier_set.as_engine_tiers()
    if not run.run_spec:
        return []
    return [t.dump() for t in run.spec.tiers]


def _artifact_link(artifact: Artifact) -> str:
    try:
        return artifact_url(artifact=artifact)
    except Exception:
        logger.exception("no link for artifact %s", artifact.storage_key)
        return ""


@dataclass
class _RunEvidence:
    """What a run's detail shows of its own: its trials, their table rows, the artifacts
    with links, and the verification report."""

    trials: list[Trial] = field(default_factory=list)
    rows: list[presenters.TrialRow] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    report: VerificationReport | None = None


def _run_evidence(run: BenchmarkRun | None, tiers: list[dict[str, Any]]) -> _RunEvidence:
    """The run's trials, each row with a link to its raw records where stored, its artifacts
    and its verification report; empty where there is no run yet."""
    if run is None:
        return _RunEvidence()
    run_artifacts = list(run.artifacts.order_by("kind", "storage_key"))
    by_key = {a.storage_key: a for a in run_artifacts}
    trials = list(run.trials.all())
    raw_urls = {
        t.index: _artifact_link(by_key[t.raw_records_key])
        for t in trials
        if t.raw_records_key in by_key
    }
    rows = presenters.trial_rows(trials, [t["name"] for t in tiers], raw_urls)
    artifacts = [
        {"artifact": a, "url": _artifact_link(a), "name": a.storage_key.rsplit("/", 1)[-1]}
        for a in run_artifacts
    ]
    report = VerificationReport.objects.filter(run=run).first()
    return _RunEvidence(trials=trials, rows=rows, artifacts=artifacts, report=report)


def _config_diffs(submission: Submission) -> list[dict[str, Any]]:
    """The submission's redacted config against the vendor's previous submission and against
    the published result for the same model × hardware, where there is one."""
    previous = submission.previous
    published = selectors.published_result_for(submission=submission)
    diffs = []
    if previous is not None:
        entries = config_diff(redact(previous.config), redact(submission.config))
        diffs.append(
            {
                "title": f"Against the vendor's previous submission #{previous.pk}",
                "anchor": "diff-previous",
                "other_pk": previous.pk,
                "entries": entries,
                "summary": diff_summary(entries),
            }
        )
    if published is not None:
        entries = config_diff(redact(published.submission.config), redact(submission.config))
        diffs.append(
            {
                "title": f"Against the published result “{published.label}” "
                f"(submission #{published.submission_id}, same model × hardware)",
                "anchor": "diff-published",
                "other_pk": published.submission_id,
                "entries": entries,
                "summary": diff_summary(entries),
            }
        )
    return diffs


def _with_evidence_rows(items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each verification check or qualification probe with its evidence as table rows."""
    return [
        {**item, "evidence_rows": presenters.evidence_rows(item.get("evidence") or {})}
        for item in items
    ]


def _detail_context(
    request: HttpRequest,
    submission: Submission,
    run: BenchmarkRun | None,
    bound: dict[str, DecisionForm] | None = None,
) -> dict[str, Any]:
    """The review detail page's context for ``submission`` and one of its runs; ``bound``
    holds decision forms to show with their errors instead of fresh ones."""
    bound = bound or {}
    tiers = _tiers_for(run)
    evidence = _run_evidence(run, tiers)
    trials, rows, report = evidence.trials, evidence.rows, evidence.report
    checks = _with_evidence_rows(c.model_dump() for c in (report.results if report else []))
    diffs = _config_diffs(submission)
    available = review_available_actions(actor=request.user, submission=submission)
    action_forms = [
        {"spec": spec, "form": bound.get(spec.name) or decision_form(spec.name, submission)}
        for spec in available
    ]
    probes = _with_evidence_rows(
        probe for probe in ((run.qualification if run else None) or []) if isinstance(probe, dict)
    )
    return {
        "submission": submission,
        "run": run,
        "runs": list(submission.runs.latest_first()),
        "tiers": presenters.tier_outcomes(run.summary if run else None, tiers),
        "search_flags": s.flags if run is not None and (s := run.summary) else [],
        "trial_rows": rows,
        "chart": presenters.trial_chart(rows, tiers) if rows else None,
        "report": report,
        "checks": checks,
        "check_counts": presenters.check_counts(report.results if report else []),
        "probes": probes,
        "runner_rows": presenters.evidence_rows(run.runner_info) if run and run.runner_info else [],
        "telemetry_rows": presenters.evidence_rows(run.telemetry) if run and run.telemetry else [],
        "diffs": diffs,
        "artifacts": evidence.artifacts,
        "timeline": selectors.submission_timeline(submission=submission),
        "action_forms": action_forms,
        "decision_errors": [],
        "conflict": review_conflict(actor=request.user, submission=submission),
        # secrets never reach a page, not even a reviewer's (docs/security.md "Secrets in
        # configs")
        "config_redacted": json.dumps(redact(submission.config), indent=2, sort_keys=True),
        # before a publish: every string the detector rated suspicious, highlighted
        "suspicious": presenters.suspicious_rows(submission.config),
        "result": Result.objects.filter(submission=submission).first(),
        "launch": presenters.launch_rows(submission),
        "timeline_trials": timeline_trials(trials) if run else [],
        "load_generator": load_generator_table(trials) if run else None,
        "timeline_base": f"/review/runs/{run.pk}/trials/" if run else "",
        "timeline_suffix": "/timeline.json",
    }
