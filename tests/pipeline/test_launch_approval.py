"""Vendor commands run only where the pool's operator allows: on a platform pool a process
launch waits until a reviewer approves that exact launch; on a vendor-operated pool only the
operator's own submissions run (docs/security.md "Vendor commands")."""

from __future__ import annotations

import pytest

from review.services import (
    ReviewError,
    ReviewForbidden,
    review_approve_launch,
    review_reject,
    review_rerun,
)
from runs.models import BenchmarkRun
from submissions import constants as c
from submissions.models import AuditEvent, LaunchApproval, Notification, RunnerPool, Submission
from submissions.schema import ConfigError
from submissions.services.lifecycle import submission_transition
from submissions.services.submissions import submission_create
from tests.pipeline.conftest import EXAMPLES
from tests.support.builders import make_user

PROCESS = (EXAMPLES / "process.yaml").read_text()


@pytest.fixture
def submit_process(catalog, django_capture_on_commit_callbacks):
    def submit(org, text: str = PROCESS) -> Submission:
        with django_capture_on_commit_callbacks(execute=True):
            submission = submission_create(org=org, config_text=text, actor_label="vendor")
        submission.refresh_from_db()
        return submission

    return submit


@pytest.mark.django_db
def test_a_process_launch_on_a_platform_pool_waits_for_approval_and_runs_once_approved(
    cast, submit_process, django_capture_on_commit_callbacks
):
    submission = submit_process(cast.org_a)
    assert submission.status == c.AWAITING_APPROVAL
    assert not BenchmarkRun.objects.filter(submission=submission).exists()

    with django_capture_on_commit_callbacks(execute=False) as sent:
        run = review_approve_launch(
            submission=submission, actor=cast.rita, reason="the repository's llama.cpp wrapper"
        )
    # the run's message (and the vendor's e-mail), sent once the approval commits
    assert [getattr(f, "__name__", "") for f in sent].count("apply_async") == 1
    submission.refresh_from_db()
    assert submission.status == c.QUEUED and run.status == BenchmarkRun.STATUS_PENDING
    approval = LaunchApproval.objects.get()
    assert (approval.org, approval.pool, approval.approved_by) == (
        cast.org_a,
        "local-cpu",
        cast.rita,
    )
    assert approval.launch["command"][:3] == ["python", "-m", "runner.launchers.llamacpp_server"]
    assert AuditEvent.objects.filter(
        action="launch_approved", object_id=str(submission.pk)
    ).exists()
    assert Notification.objects.filter(org=cast.org_a, action="approve_launch").exists()


@pytest.mark.django_db
def test_approving_a_launch_needs_a_reviewer_outside_the_org_and_a_reason(cast, submit_process):
    submission = submit_process(cast.org_a)
    insider = make_user("carol", org=cast.org_a, staff=True)
    with pytest.raises(ReviewForbidden):
        review_approve_launch(submission=submission, actor=insider, reason="mine")
    with pytest.raises(ReviewForbidden):
        review_approve_launch(submission=submission, actor=cast.alice, reason="mine")
    with pytest.raises(ReviewError, match="reason"):
        review_approve_launch(submission=submission, actor=cast.rita, reason=" ")
    assert not LaunchApproval.objects.exists()
    submission.refresh_from_db()
    assert submission.status == c.AWAITING_APPROVAL


@pytest.mark.django_db
def test_a_rerun_reuses_the_approval_and_a_changed_launch_needs_a_new_one(cast, submit_process):
    first = submit_process(cast.org_a)
    review_approve_launch(submission=first, actor=cast.rita, reason="ok")
    run = BenchmarkRun.objects.get(submission=first)
    BenchmarkRun.objects.filter(pk=run.pk).update(status=BenchmarkRun.STATUS_FAILED)
    for to in (c.RUNNING, c.FAILED):
        submission_transition(submission=first, to=to, actor_label="test", reason="test")
    review_rerun(submission=first, actor=cast.rita, reason="flaky host")
    first.refresh_from_db()
    assert first.status == c.QUEUED  # the same launch: no second approval
    assert LaunchApproval.objects.count() == 1

    same = submit_process(cast.org_a, PROCESS.replace("notes: A real", "notes: Again, a real"))
    assert same.status == c.QUEUED  # an identical launch of the same org is approved already
    changed = submit_process(cast.org_a, PROCESS.replace('- "4"\n', '- "2"\n', 1))
    assert changed.status == c.AWAITING_APPROVAL
    other_org = submit_process(cast.org_b)
    assert other_org.status == c.AWAITING_APPROVAL  # approvals are per organization


@pytest.mark.django_db
def test_a_reviewer_can_reject_a_launch_with_a_reason(cast, submit_process):
    submission = submit_process(cast.org_a)
    with pytest.raises(ReviewError):
        review_reject(submission=submission, actor=cast.rita, reason="")
    review_reject(submission=submission, actor=cast.rita, reason="runs a shell")
    submission.refresh_from_db()
    assert submission.status == c.REJECTED and submission.status_reason == "runs a shell"


@pytest.mark.django_db
def test_on_a_vendor_operated_pool_only_the_operator_runs_and_without_approval(
    cast, submit_process
):
    RunnerPool.objects.create(slug="local-cpu", operator_org=cast.org_a)
    own = submit_process(cast.org_a)
    assert own.status == c.QUEUED
    assert BenchmarkRun.objects.filter(submission=own).exists()
    assert not LaunchApproval.objects.exists()
    with pytest.raises(ConfigError) as info:
        submit_process(cast.org_b)
    assert list(info.value.fields) == ["topology.roles.0.hardware"]
    assert "another organization" in info.value.fields["topology.roles.0.hardware"][0]


@pytest.mark.django_db
def test_the_review_page_shows_the_exact_launch_to_approve(cast, submit_process, client):
    submission = submit_process(cast.org_a)
    client.force_login(cast.rita)
    html = client.get(f"/review/submissions/{submission.pk}/").content.decode()
    assert "Launched process" in html and "Not approved yet" in html
    assert "runner.launchers.llamacpp_server" in html
    assert "Approve launch" in html
    assert "inside the sandbox (the image is not run)" in html


@pytest.mark.django_db
def test_a_container_launch_waits_for_approval_and_its_page_names_the_pinned_image(
    cast, submit_process, client
):
    submission = submit_process(cast.org_a, (EXAMPLES / "container.yaml").read_text())
    assert submission.status == c.AWAITING_APPROVAL
    client.force_login(cast.rita)
    html = client.get(f"/review/submissions/{submission.pk}/").content.decode()
    assert "in the image above, pulled by its digest, with Podman" in html
    assert submission.config["engine"]["image"] in html
