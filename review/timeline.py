"""The review console's per-session timeline of any run's trials (staff only), the same
reader as the public result page's (runs.timeline)."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET

from core.error_shape import error_body
from review.views import staff_required
from runs.models import Trial
from runs.timeline import RecordsUnavailable, TimelineError, timeline_read


@require_GET
@staff_required
def run_trial_timeline(request: HttpRequest, run_pk: int, index: int) -> JsonResponse:
    trial = get_object_or_404(Trial, run_id=run_pk, index=index)
    try:
        return JsonResponse(timeline_read(trial, request.GET))
    except TimelineError as exc:
        code = "invalid" if exc.status == 400 else "not_found"
        return JsonResponse(error_body(code, str(exc), {exc.field: [str(exc)]}), status=exc.status)
    except RecordsUnavailable as exc:
        return JsonResponse(error_body("not_found", str(exc)), status=404)
