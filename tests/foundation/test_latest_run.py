"""A submission's latest run: one rule (runs.models.BenchmarkRunQuerySet), newest by
creation time, the higher id first when two runs share a timestamp."""

from datetime import timedelta

import pytest
from django.utils import timezone

from demo.synthetic import make_org, make_submission
from runs.models import BenchmarkRun, latest_of
from submissions.models import Submission


def _run(submission, status: str, created_at) -> BenchmarkRun:
    run = BenchmarkRun.objects.create(submission=submission, status=status)
    BenchmarkRun.objects.filter(pk=run.pk).update(created_at=created_at)
    return run


@pytest.mark.django_db
def test_the_newest_run_is_the_latest_and_a_tie_goes_to_the_higher_id():
    sub = make_submission(org=make_org())
    other = make_submission(org=make_org())
    now = timezone.now()
    old = _run(sub, "done", now - timedelta(hours=1))
    tie_low = _run(sub, "failed", now)
    tie_high = _run(sub, "failed", now)
    _run(other, "done", now + timedelta(hours=1))  # another submission's newer run

    assert tie_low.pk < tie_high.pk
    assert BenchmarkRun.objects.latest_for(sub) == tie_high
    assert list(sub.runs.latest_first()) == [tie_high, tie_low, old]
    assert sub.runs.latest_first().first() == tie_high
    # the same rule on runs already loaded, shuffled by the database's order
    loaded = Submission.objects.prefetch_related("runs").get(pk=sub.pk)
    assert latest_of(loaded.runs.all()) == tie_high
    assert latest_of([]) is None


@pytest.mark.django_db
def test_the_latest_finished_run_skips_newer_unfinished_ones():
    sub = make_submission(org=make_org())
    now = timezone.now()
    done = _run(sub, "done", now - timedelta(minutes=5))
    _run(sub, "running", now)

    assert BenchmarkRun.objects.done().latest_for(sub) == done
    assert BenchmarkRun.objects.done().latest_for(make_submission(org=make_org())) is None


@pytest.mark.django_db
def test_the_vendor_submission_list_reads_each_latest_run_without_a_query_per_row():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.submissions.support import token_client

    org = make_org()
    client = token_client(org)
    now = timezone.now()
    counts = []
    for rows in (2, 6):
        while Submission.objects.filter(org=org).count() < rows:
            sub = make_submission(org=org)
            _run(sub, "done", now - timedelta(minutes=1))
            _run(sub, "failed", now)
        client.get("/api/v1/submissions/")  # warm caches (throttles, content types)
        with CaptureQueriesContext(connection) as queries:
            response = client.get("/api/v1/submissions/")
        assert response.status_code == 200
        body = response.json()
        listed = body["results"] if isinstance(body, dict) else body
        assert len(listed) == rows
        assert all(row["latest_run"]["status"] == "failed" for row in listed)
        counts.append(len(queries))
    assert counts[0] == counts[1], counts  # constant in the number of rows
