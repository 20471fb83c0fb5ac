"""The review console in a real browser: Playwright driving Debian Chromium against the live
test server, signing in through the login page. Requests off the live server are aborted and
fail the test. Screenshots go to the test's artifacts folder."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from django.core import mail

from demo.synthetic import make_hardware, make_model, make_tier_set
from leaderboard.models import Result
from runs.models import BenchmarkRun
from submissions import constants as c
from submissions.models import Notification, Submission
from submissions.selectors import notification_list
from submissions.services.lifecycle import submission_transition
from submissions.services.submissions import submission_create, submission_resubmit
from tests.review.builders import finish_run, make_reviewable
from tests.support.browser import csp_watch

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "simulated.yaml"


@pytest.fixture
def new_page(browser, live_server):
    """A fresh browser context per user; requests leaving the live server are aborted."""
    allowed = urlsplit(live_server.url).netloc
    strays: list[str] = []
    contexts = []

    def guard(route):
        url = route.request.url
        if urlsplit(url).netloc == allowed or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            strays.append(url)
            route.abort()

    def make():
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.route("**/*", guard)
        csp_watch(context, violations)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(20_000)
        return page

    violations: list[str] = []
    yield make
    for context in contexts:
        context.close()
    assert strays == [], f"requests left the live server: {strays}"
    # docs/security.md "Headers": the console's pages run under the CSP, nothing refused
    assert violations == [], f"Content-Security-Policy violations: {violations}"


def sign_in(page, live_server, user, next_path: str) -> None:
    page.goto(f"{live_server.url}/accounts/login/?next={next_path}")
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", f"{user.username}-password-123")
    page.locator("form").filter(has=page.locator("input[name=password]")).locator(
        "[type=submit]"
    ).click()
    page.wait_for_url(re.compile(re.escape(next_path) + r"$"))


def test_a_reviewer_publishes_a_run_from_the_queue(new_page, live_server, cast, artifacts_dir):
    sub = make_reviewable(org=cast.org_a, artifacts=True)
    page = new_page()
    sign_in(page, live_server, cast.rita, "/review/")

    row = page.locator(f'tr[data-submission="{sub.pk}"]')
    assert row.locator(".state").inner_text() == "In review"
    page.screenshot(path=artifacts_dir / "1-queue.png", full_page=True)
    row.get_by_role("link", name=f"#{sub.pk}", exact=True).click()
    page.wait_for_url(f"**/review/submissions/{sub.pk}/")

    # plotly.js (from static/) drew both panels with a dotted line per tier
    page.wait_for_selector("#trial-chart .main-svg")
    assert page.locator("#trial-chart .cartesianlayer .subplot").count() == 2
    assert page.locator('#trial-chart path[style*="stroke-dasharray"]').count() >= 5
    assert page.locator("table.search-path tbody tr").count() == 8
    assert page.locator("[data-check]").count() == 2
    assert page.locator("#artifacts a", has_text="runner.log").count() == 1
    page.screenshot(path=artifacts_dir / "2-run-page.png", full_page=True)

    form = page.locator('form[data-action="publish"]')
    form.locator("textarea").fill("All checks pass; the 20 tok/s tier is confirmed at 24.")
    form.get_by_role("button", name="Publish").click()
    page.wait_for_url(f"**/review/submissions/{sub.pk}/")

    assert page.locator("#submission-state").inner_text() == "Published"
    assert "published" in page.locator(".messages").inner_text()
    event = page.locator('.timeline li[data-to="published"]')
    assert "rita" in event.inner_text()
    assert "the 20 tok/s tier is confirmed at 24" in event.inner_text()
    # the published state offers only retiring the result now
    actions = page.locator("form[data-action]").evaluate_all(
        "forms => forms.map(f => f.dataset.action)"
    )
    assert actions == ["supersede", "invalidate", "redact"]
    page.screenshot(path=artifacts_dir / "3-published.png", full_page=True)

    result = Result.objects.get(submission=sub)
    assert result.status == Result.STATUS_PUBLISHED
    assert [m.to for m in mail.outbox] == [[cast.alice.email]]
    assert "the 20 tok/s tier is confirmed at 24" in mail.outbox[0].body


def _simulated_catalog():
    """The catalog rows docs/examples/simulated.yaml names, a default tier set and the
    private test set rows dispatch looks for (their trials are never run here)."""
    from django.core.files.base import ContentFile
    from django.core.files.storage import storages

    from catalog.datasets import SIZE_SMALL, SIZE_STANDARD, test_set_spec
    from catalog.models import Dataset

    config = yaml.safe_load(EXAMPLE.read_text())
    make_model(slug=config["model"]["id"])
    make_hardware(slug=config["topology"]["roles"][0]["hardware"])
    make_tier_set()
    storage = storages["datasets"]
    for i, size in enumerate((SIZE_SMALL, SIZE_STANDARD)):
        spec = test_set_spec(size)
        key = f"test-review/{spec.name}.jsonl.gz"
        if not storage.exists(key):
            storage.save(key, ContentFile(b"placeholder; these tests never run the trials"))
        Dataset.objects.create(
            name=spec.name,
            version=spec.version,
            visibility=Dataset.VISIBILITY_PRIVATE,
            sha256=f"{i}" * 64,
            storage_key=key,
        )


def _run_through_the_runner(sub: Submission) -> BenchmarkRun:
    """Stand in for the pool worker: finish the run dispatch queued and move the submission
    to in_review, as the runner API would. The queued task message is deleted unconsumed."""
    from config.celery import app

    sub.refresh_from_db()
    assert sub.status == c.QUEUED, "dispatch queued the submission"
    run = BenchmarkRun.objects.get(submission=sub)
    with app.connection_for_write() as conn:
        conn.default_channel.queue_delete(run.queue)
    for state in (c.RUNNING, c.VERIFYING, c.IN_REVIEW):
        submission_transition(submission=sub, to=state, actor_label="runner")
    return finish_run(sub, run=run)


def test_changes_requested_then_the_vendor_resubmits_and_the_diff_shows_what_changed(
    new_page, live_server, cast, artifacts_dir
):
    _simulated_catalog()
    original = EXAMPLE.read_text()
    first = submission_create(org=cast.org_a, config_text=original, created_by=cast.alice)
    _run_through_the_runner(first)

    page = new_page()
    sign_in(page, live_server, cast.rita, "/review/")
    page.locator(f'tr[data-submission="{first.pk}"]').get_by_role(
        "link", name=f"#{first.pk}", exact=True
    ).click()
    page.wait_for_url(f"**/review/submissions/{first.pk}/")
    form = page.locator('form[data-action="request_changes"]')
    # An empty reason is refused in the browser before it reaches the server.
    form.get_by_role("button", name="Request changes").click()
    assert form.locator("textarea").evaluate("t => t.validity.valueMissing") is True
    assert Submission.objects.get(pk=first.pk).status == c.IN_REVIEW
    form.locator("textarea").fill("The search hit the agent cap: raise max_concurrency.")
    form.get_by_role("button", name="Request changes").click()
    page.wait_for_url(f"**/review/submissions/{first.pk}/")
    assert page.locator("#submission-state").inner_text() == "Changes requested"
    page.screenshot(path=artifacts_dir / "1-changes-requested.png", full_page=True)

    # The vendor is told in the portal and by e-mail, with the reviewer's reason.
    assert [m.to for m in mail.outbox] == [[cast.alice.email]]
    notes = list(notification_list(user=cast.alice))
    assert [n.action for n in notes] == ["request_changes"]
    assert "raise max_concurrency" in notes[0].body
    assert list(notification_list(user=cast.bob)) == []

    # Alice resubmits an amended config (the vendor service the API and portal use).
    document = yaml.safe_load(original)
    cap = document["benchmark"]["max_concurrency"]
    document["benchmark"]["max_concurrency"] = cap * 2
    amended = yaml.safe_dump(document, sort_keys=False)
    second = submission_resubmit(
        previous=first, config_text=amended, created_by=cast.alice
    ).submission
    assert second.previous_id == first.pk
    _run_through_the_runner(second)

    page.goto(f"{live_server.url}/review/")
    row = page.locator(f'tr[data-submission="{second.pk}"]')
    assert row.locator(".state").inner_text() == "In review"
    assert page.locator(f'tr[data-submission="{first.pk}"]').count() == 0
    row.get_by_role("link", name=f"#{second.pk}", exact=True).click()
    page.wait_for_url(f"**/review/submissions/{second.pk}/")
    diff = page.locator("#diff-previous")
    assert f"previous submission #{first.pk}" in diff.inner_text()
    rows = diff.locator("table.config-diff tbody tr")
    assert rows.count() == 1
    assert rows.first.inner_text().split() == [
        "benchmark.max_concurrency",
        "changed",
        str(cap),
        str(cap * 2),
    ]
    page.screenshot(path=artifacts_dir / "2-resubmission-diff.png", full_page=True)

    form = page.locator('form[data-action="publish"]')
    form.locator("textarea").fill("Cap raised; every tier now converged.")
    form.get_by_role("button", name="Publish").click()
    page.wait_for_url(f"**/review/submissions/{second.pk}/")
    assert page.locator("#submission-state").inner_text() == "Published"
    assert Notification.objects.filter(org=cast.org_a).count() == 2
    page.screenshot(path=artifacts_dir / "3-resubmission-published.png", full_page=True)
