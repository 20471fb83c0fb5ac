"""A check's status has one definition (agentperf.verification.status): the worst of a report's
checks is its status, and the contract and the database take nothing else."""

import pytest
from django.db import IntegrityError, transaction
from pydantic import ValidationError

from agentperf import contract
from agentperf.verification.status import FAIL, PASS, STATUSES, WARN, worst_status
from demo.synthetic import make_org, make_submission
from runs.models import BenchmarkRun, VerificationReport


@pytest.mark.parametrize(
    ("statuses", "worst"),
    [
        ([], PASS),
        ([PASS, PASS], PASS),
        ([PASS, WARN, PASS], WARN),
        ([WARN, FAIL, PASS], FAIL),
        ([PASS, "skipped"], FAIL),  # not a status: counts as a failure
    ],
)
def test_the_worst_status_wins(statuses, worst):
    assert worst_status(iter(statuses)) == worst


def test_the_contract_takes_only_the_three_statuses():
    check = {"name": "x", "summary": "", "fatal": False, "evidence": {}}
    assert [contract.Check.model_validate({**check, "status": s}).status for s in STATUSES] == [
        "pass",
        "warn",
        "fail",
    ]
    with pytest.raises(ValidationError):
        contract.Check.model_validate({**check, "status": "skipped"})


@pytest.mark.django_db
def test_the_database_takes_only_the_three_statuses():
    run = BenchmarkRun.objects.create(submission=make_submission(org=make_org()))
    assert [c for c, _ in VerificationReport.STATUS_CHOICES] == list(STATUSES)
    with pytest.raises(IntegrityError), transaction.atomic():
        VerificationReport.objects.create(run=run, status="skipped")
    VerificationReport.objects.create(run=run, status=WARN)
