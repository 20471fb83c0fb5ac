"""A submission's latest run: one rule (runs.models.BenchmarkRunQuerySet), newest by
creation time, the higher id first when two runs share a timestamp."""

from datetime import timedelta

import pytest
from django.utils import timezone

from demo.synthetic import make_org, make_submission
from runs.models import BenchmarkRun


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


@pytest.mark.django_db
def test_the_latest_finished_run_skips_newer_unfinished_ones():
    sub = make_submission(org=make_org())
    now = timezone.now()
    done = _run(sub, "done", now - timedelta(minutes=5))
    _run(sub, "running", now)

    assert BenchmarkRun.objects.done().latest_for(sub) == done
    assert BenchmarkRun.objects.done().latest_for(make_submission(org=make_org())) is None
