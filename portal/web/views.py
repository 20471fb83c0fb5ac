"""Portal views: thin; the services do the work and the org scoping is in every query."""

from __future__ import annotations

from math import ceil

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from portal.api.access import submit_allowed
from portal.web.annotate import annotate
from portal.web.forms import SubmitConfigForm
from runs.models import BenchmarkRun, Trial
from runs.progress import run_progress
from submissions.models import Organization, Submission
from submissions.schema import ConfigError
from submissions.services.lifecycle import TransitionError
from submissions.services.submissions import (
    WITHDRAWABLE_STATES,
    IdempotencyConflict,
    submission_create,
    submission_withdraw,
)


def portal_org(request: HttpRequest) -> Organization:
    """The user's vendor organization (the `org` query parameter picks one of several)."""
    orgs = Organization.objects.filter(memberships__user=request.user).order_by("name")
    wanted = request.GET.get("org") or request.session.get("portal_org")
    org = orgs.filter(slug=wanted).first() if wanted else None
    org = org or orgs.first()
    if org is None:
        raise PermissionDenied("The portal is for members of a vendor organization.")
    request.session["portal_org"] = org.slug
    return org


def _own_submission(request: HttpRequest, pk: int) -> Submission:
    submission = (
        Submission.objects.filter(org=portal_org(request), pk=pk)
        .select_related("model", "hardware", "previous")
        .first()
    )
    if submission is None:
        raise Http404("No such submission in your organization.")
    return submission


def _latest_run(submission: Submission) -> BenchmarkRun | None:
    return BenchmarkRun.objects.prefetch_related(
        Prefetch("trials", queryset=Trial.objects.order_by("index"))
    ).latest_for(submission)


def status_payload(submission: Submission, run: BenchmarkRun | None) -> dict:
    return {
        "id": submission.pk,
        "status": submission.status,
        "status_display": submission.get_status_display(),
        "status_reason": submission.status_reason,
        "run": None
        if run is None
        else {
            "id": run.pk,
            "status": run.status,
            "progress": run_progress(run),
            "heartbeat_at": run.heartbeat_at.isoformat() if run.heartbeat_at else None,
            "trials": run.trials.count(),
        },
    }


def trial_rows(run: BenchmarkRun | None) -> list[dict]:
    """The result preview: one row per trial (a frontier point) with its tier verdicts."""
    if run is None:
        return []
    rows = []
    for trial in run.trials.all():
        m = trial.summary  # docs/pipeline.md "The contract"
        rows.append(
            {
                "index": trial.index,
                "phase": trial.phase,
                "concurrency": trial.concurrency,
                "p25_speed": m.p25_output_speed,
                "ttft_p75": m.ttft_s.get("p75"),
                "throughput": m.throughput_per_accelerator,
                "error_rate": m.error_rate,
                "verdicts": [(name, v.passed) for name, v in trial.tier_verdicts.items()],
            }
        )
    return rows


@login_required
@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    org = portal_org(request)
    submissions = (
        Submission.objects.filter(org=org)
        .select_related("model", "hardware")
        .prefetch_related(Prefetch("runs", queryset=BenchmarkRun.objects.latest_first()))[:200]
    )
    rows = [(s, next(iter(s.runs.all()), None)) for s in submissions]
    from submissions.selectors import notification_list

    return render(
        request,
        "portal/dashboard.html",
        {"org": org, "rows": rows, "notifications": notification_list(user=request.user)},
    )


@login_required
def submit(request: HttpRequest) -> HttpResponse:
    org = portal_org(request)
    lines, unplaced, error = None, None, None
    wait = None
    if request.method == "POST":
        form = SubmitConfigForm(request.POST, request.FILES)
        if form.is_valid() and (wait := submit_allowed(request, org)) is not None:
            # the API's vendor_submit budget is spent: a 429, the text kept in the form
            error = f"Too many submissions for {org.name}; try again in {ceil(wait)} s."
        elif form.is_valid():
            text = form.cleaned_data["config_text"]
            try:
                submission = submission_create(
                    org=org,
                    config_text=text,
                    content_type=form.cleaned_data["content_type"],
                    idempotency_key=form.cleaned_data.get("idempotency_key") or None,
                    created_by=request.user,
                )
            except ConfigError as exc:
                error = exc.message
                lines, unplaced = annotate(text, exc.fields)
                # Unbound, so it gets a fresh key: the corrected config is a new submission.
                form = SubmitConfigForm(initial={"config_text": text})
            except IdempotencyConflict as exc:
                error = str(exc)
            else:
                messages.success(request, f"Submission #{submission.pk} is {submission.status}.")
                return redirect("portal:detail", pk=submission.pk)
    else:
        form = SubmitConfigForm()
    context = {"org": org, "form": form, "lines": lines, "unplaced": unplaced, "error": error}
    status = 429 if wait is not None else 400 if error else 200
    response = render(request, "portal/submit.html", context, status=status)
    if wait is not None:
        response["Retry-After"] = str(ceil(wait))
    return response


@login_required
@require_GET
def detail(request: HttpRequest, pk: int) -> HttpResponse:
    submission = _own_submission(request, pk)
    run = _latest_run(submission)
    context = {
        "org": submission.org,
        "submission": submission,
        "run": run,
        "rows": trial_rows(run),
        "verification": getattr(run, "verification", None) if run else None,
        "can_withdraw": submission.status in WITHDRAWABLE_STATES,
        "status": status_payload(submission, run),
    }
    return render(request, "portal/detail.html", context)


@login_required
@require_GET
def status_json(request: HttpRequest, pk: int) -> JsonResponse:
    submission = _own_submission(request, pk)
    return JsonResponse(status_payload(submission, _latest_run(submission)))


@login_required
@require_POST
def withdraw(request: HttpRequest, pk: int) -> HttpResponse:
    submission = _own_submission(request, pk)
    try:
        submission_withdraw(
            submission=submission, actor=request.user, reason=request.POST.get("reason", "")
        )
    except TransitionError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Submission #{submission.pk} withdrawn.")
    return redirect("portal:detail", pk=submission.pk)
