"""Public per-session timeline of a result's trials (/api/v1/public/results/<pk>/trials/
<index>/timeline/), read from the run's raw records in storage (runs.timeline)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from core.api_errors import ApiError
from leaderboard.api import PublicApi
from leaderboard.models import Result
from runs.models import Trial
from runs.timeline import RecordsUnavailable, TimelineError, timeline_read


class TimelineOut(serializers.Serializer):
    trial = serializers.IntegerField()
    concurrency = serializers.IntegerField()
    offset = serializers.IntegerField()
    limit = serializers.IntegerField()
    count = serializers.IntegerField(required=False, help_text="sessions in the trial")
    sessions = serializers.JSONField(required=False, help_text="without agent/session")
    turns = serializers.JSONField(required=False, help_text="with agent and session")
    more = serializers.BooleanField(required=False)


def trial_timeline_response(trial: Trial, request: Request) -> Response:
    """The timeline page for `trial`, or a 4xx in the API's error shape naming the field."""
    try:
        return Response(timeline_read(trial, request.query_params))
    except TimelineError as exc:
        raise ApiError(
            "invalid" if exc.status == 400 else "not_found",
            str(exc),
            status_code=exc.status,
            fields={exc.field: [str(exc)]},
        ) from exc
    except RecordsUnavailable as exc:
        raise NotFound(str(exc)) from exc


class ResultTrialTimelineApi(PublicApi):
    @extend_schema(
        responses=TimelineOut,
        operation_id="public_results_trial_timeline",
        parameters=[
            OpenApiParameter("agent", int, description="agent id (with session: its turns)"),
            OpenApiParameter("session", str, description="session id of that agent"),
            OpenApiParameter("offset", int, description="first row of the page (default 0)"),
            OpenApiParameter("limit", int, description="rows per page, 1-200 (default 50)"),
        ],
    )
    def get(self, request: Request, pk: int, index: int) -> Response:
        result = Result.objects.only("run_id").filter(pk=pk).first()
        if result is None:
            raise NotFound(f"no result {pk}")
        trial = Trial.objects.filter(run_id=result.run_id, index=index).first()
        if trial is None:
            raise NotFound(f"result {pk} has no trial {index}")
        return trial_timeline_response(trial, request)
