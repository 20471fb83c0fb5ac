"""The console pages as a reviewer sees them: queue filters and counts, the run page, forms."""

import datetime as dt
import re

import pytest
from django.core import mail
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from demo.synthetic import make_hardware, make_model, make_submission
from leaderboard.models import Result
from review.selectors import review_queue, review_state_counts
from review.services import review_publish, review_request_changes
from submissions import constants as c
from submissions.models import AuditEvent, Notification, Submission
from submissions.selectors import notification_list
from tests.review.builders import CONFIG, make_reviewable


def _rows(response) -> list[int]:
    return [int(pk) for pk in re.findall(rb'data-submission="(\d+)"', response.content)]


@pytest.fixture
def rita_client(client, cast):
    client.force_login(cast.rita)
    return client


@pytest.mark.django_db
def test_the_queue_shows_submissions_in_review_by_default_with_counts_per_state(rita_client, cast):
    waiting = make_reviewable(org=cast.org_a)
    make_submission(org=cast.org_b, status=c.RUNNING)
    make_submission(org=cast.org_b, status=c.RUNNING)
    response = rita_client.get(reverse("review:queue"))
    assert _rows(response) == [waiting.pk]
    html = response.content.decode()
    assert re.search(r'data-state="running"[^>]*>Running <span class="count">2</span>', html)
    assert re.search(r'data-state="in_review"[^>]*>In review <span class="count">1</span>', html)
    assert re.search(r"all <span class=\"count\">3</span>", html)


@pytest.mark.django_db
def test_the_queue_filters_by_state_vendor_hardware_and_model(rita_client, cast):
    hw = make_hardware()
    model = make_model()
    a = make_reviewable(org=cast.org_a, hardware=hw)
    b = make_reviewable(org=cast.org_b, model=model)
    c_run = make_submission(org=cast.org_b, status=c.RUNNING, hardware=hw)
    url = reverse("review:queue")
    assert _rows(rita_client.get(url, {"org": cast.org_b.slug})) == [b.pk]
    assert _rows(rita_client.get(url, {"state": "", "hardware": hw.slug})) == [a.pk, c_run.pk]
    assert _rows(rita_client.get(url, {"model": model.slug})) == [b.pk]
    assert _rows(rita_client.get(url, {"state": c.RUNNING})) == [c_run.pk]


@pytest.mark.django_db
def test_the_age_filter_uses_the_time_spent_in_the_current_state(cast):
    now = timezone.now()
    fresh = make_reviewable(org=cast.org_a)
    old = make_reviewable(org=cast.org_a)
    ancient = make_reviewable(org=cast.org_b)
    Submission.objects.filter(pk=fresh.pk).update(status_changed_at=now - dt.timedelta(hours=2))
    Submission.objects.filter(pk=old.pk).update(status_changed_at=now - dt.timedelta(days=3))
    Submission.objects.filter(pk=ancient.pk).update(status_changed_at=now - dt.timedelta(days=40))

    def pks(age):
        return [s.pk for s in review_queue(state=c.IN_REVIEW, age=age, now=now)]

    assert pks("") == [ancient.pk, old.pk, fresh.pk], "oldest waiting first"
    assert pks("lt1d") == [fresh.pk]
    assert pks("1to7d") == [old.pk]
    assert pks("gt7d") == [ancient.pk]
    assert pks("gt30d") == [ancient.pk]
    counts = {r["state"]: r["count"] for r in review_state_counts(age="gt7d", now=now)}
    assert counts[c.IN_REVIEW] == 1 and counts[c.RUNNING] == 0


@pytest.mark.django_db
def test_an_unknown_filter_value_falls_back_to_the_default_queue(rita_client, cast):
    sub = make_reviewable(org=cast.org_a)
    response = rita_client.get(reverse("review:queue"), {"age": "forever"})
    assert response.status_code == 200
    assert _rows(response) == [sub.pk]


@pytest.mark.django_db
def test_the_queue_is_refused_to_a_reviewer_who_joined_a_vendor_org(rita_client, cast):
    from submissions.models import Membership

    # the staff rule (docs/security.md "Staff"): staff and a vendor member, never both
    Membership.objects.create(user=cast.rita, org=cast.org_a)
    make_reviewable(org=cast.org_a)
    make_reviewable(org=cast.org_b)
    response = rita_client.get(reverse("review:queue"))
    assert response.status_code == 403
    assert "Org B" not in response.content.decode()


@pytest.mark.django_db
def test_the_run_page_shows_tiers_chart_search_path_and_every_check_with_evidence(
    rita_client, cast
):
    sub = make_reviewable(org=cast.org_a)
    response = rita_client.get(reverse("review:submission", args=[sub.pk]))
    html = response.content.decode()
    # the chart: a Plotly figure embedded as JSON and plotly.js from static/
    assert 'id="trial-chart-data"' in html and "/static/vendor/plotly-finance.min.js" in html
    figure = response.context["chart"]
    assert {t.get("name") for t in figure["data"]} >= {"ramp", "bisect", "confirm"}
    # the search path in run order with per-tier verdicts
    assert re.findall(r'data-trial="(\d+)"', html) == [str(i) for i in range(8)]
    row7 = html.split('data-trial="7"')[1].split("</tr>")[0]
    assert "confirm" in row7 and row7.count(">pass<") == 1 and row7.count(">fail<") == 4
    assert "p25 speed 30 &lt; 60 tok/s" in row7
    # tier outcomes from the search summary
    assert re.search(r"20 tok/s</th>.*?<td class=\"num\">24</td>", html, re.S)
    assert "unconfirmed" in html
    # every verification check, its rule and evidence
    assert 'data-check="fidelity"' in html and 'data-check="cache_honesty"' in html
    assert "n_out == target for every request in the window" in html
    assert "<code>token_count.max_rel_diff</code>" in html
    assert "&quot;agent&quot;: 3" in html
    assert "1 pass, 1 warn, 0 fail." in html


@pytest.mark.django_db
def test_the_run_page_diffs_the_config_against_the_previous_submission_and_the_published_result(
    rita_client, cast, django_capture_on_commit_callbacks
):
    model, hw = make_model(), make_hardware()
    published = make_reviewable(org=cast.org_b, model=model, hardware=hw)
    review_publish(submission=published, actor=cast.rita, reason="verified")
    previous = make_reviewable(org=cast.org_a, model=model, hardware=hw, status=c.CHANGES_REQUESTED)
    config = {
        **CONFIG,
        "engine": {"name": "vllm", "version": "0.15.0", "args": {"max_num_seqs": 512}},
    }
    sub = make_reviewable(
        org=cast.org_a, model=model, hardware=hw, config=config, previous=previous
    )
    response = rita_client.get(reverse("review:submission", args=[sub.pk]))
    diffs = response.context["diffs"]
    assert [d["anchor"] for d in diffs] == ["diff-previous", "diff-published"]
    assert [(e.path, e.old, e.new) for e in diffs[0]["entries"]] == [
        ("engine.args.max_num_seqs", 256, 512),
        ("engine.version", "0.14.0", "0.15.0"),
    ]
    html = response.content.decode()
    assert f"previous submission #{previous.pk}" in html
    assert f"submission #{published.pk}, same model × hardware" in html
    assert "<code>engine.args.max_num_seqs</code>" in html


@pytest.mark.django_db
def test_the_run_page_links_runner_logs_and_raw_records_through_expiring_urls(rita_client, cast):
    sub = make_reviewable(org=cast.org_a, artifacts=True)
    html = rita_client.get(reverse("review:submission", args=[sub.pk])).content.decode()
    assert 'data-kind="log"' in html and "runner.log</a>" in html
    assert 'data-kind="raw_records"' in html and "requests.jsonl</a>" in html
    links = re.findall(r'<a href="([^"]+)" rel="nofollow">records</a>', html)
    assert len(links) == 1, "trial 0 links its raw records"
    assert "X-Amz-Expires" in links[0] or "/files/artifacts/?t=" in links[0]


@pytest.mark.django_db
def test_a_decision_without_a_reason_shows_a_form_error_and_changes_nothing(rita_client, cast):
    sub = make_reviewable(org=cast.org_a)
    response = rita_client.post(
        reverse("review:decide", args=[sub.pk, "reject"]), {"reject-reason": "  "}
    )
    assert response.status_code == 400
    assert b"Give a reason: the vendor reads it and the audit keeps it." in response.content
    assert Submission.objects.get(pk=sub.pk).status == c.IN_REVIEW
    assert not AuditEvent.objects.filter(to_state=c.REJECTED).exists()


@pytest.mark.django_db
def test_publishing_from_the_page_redirects_to_a_timeline_with_the_reviewer_and_reason(
    rita_client, cast, django_capture_on_commit_callbacks
):
    sub = make_reviewable(org=cast.org_a)
    with django_capture_on_commit_callbacks(execute=True):
        response = rita_client.post(
            reverse("review:decide", args=[sub.pk, "publish"]),
            {"publish-reason": "all checks pass; tiers confirmed"},
        )
    assert response.status_code == 302
    assert response["Location"] == reverse("review:submission", args=[sub.pk])
    assert Result.objects.filter(submission=sub).exists()
    page = rita_client.get(response["Location"]).content.decode()
    assert "published</li>" in page.replace("\n", "") or 'data-to="published"' in page
    item = page.split('data-to="published"')[1].split("</li>")[0]
    assert "rita" in item and "all checks pass; tiers confirmed" in item
    assert [m.to for m in mail.outbox] == [[cast.alice.email]]


@pytest.mark.django_db
def test_a_decision_that_lost_a_race_is_reported_not_applied(rita_client, cast):
    sub = make_reviewable(org=cast.org_a)
    Submission.objects.filter(pk=sub.pk).update(status=c.WITHDRAWN)
    response = rita_client.post(
        reverse("review:decide", args=[sub.pk, "publish"]), {"publish-reason": "fine"}
    )
    assert response.status_code == 409
    assert b"is withdrawn; publish needs it to be in review" in response.content
    assert not Result.objects.exists()


@pytest.mark.django_db
def test_an_unknown_action_is_404(rita_client, cast):
    sub = make_reviewable(org=cast.org_a)
    response = rita_client.post(
        reverse("review:decide", args=[sub.pk, "delete"]), {"delete-reason": "x"}
    )
    assert response.status_code == 404


@pytest.mark.django_db
def test_vendors_read_their_own_orgs_notifications_only_through_the_portal_include(cast):
    sub = make_reviewable(org=cast.org_a)
    review_request_changes(submission=sub, actor=cast.rita, reason="use the private dataset")
    other = make_reviewable(org=cast.org_b)
    review_request_changes(submission=other, actor=cast.rita, reason="bob's problem")
    mine = list(notification_list(user=cast.alice))
    assert [n.submission_id for n in mine] == [sub.pk]
    assert list(notification_list(user=cast.rita)) == []
    html = render_to_string("review/_notifications.html", {"notifications": mine})
    assert "use the private dataset" in html and "bob&#x27;s problem" not in html
    assert f'data-notification="{mine[0].pk}"' in html and "unread" in html
    assert Notification.objects.count() == 2


@pytest.mark.django_db
def test_the_run_page_shows_qualification_probes_and_what_the_worker_reported(rita_client, cast):
    sub = make_reviewable(org=cast.org_a)
    run = sub.runs.get()
    run.qualification = [
        {
            "name": "cached_tokens_reported",
            "status": "fail",
            "summary": "usage has no cached_tokens; vLLM needs --enable-prompt-tokens-details",
            "evidence": {"usage": {"prompt_tokens": 812}},
        }
    ]
    run.runner_info = {"hostname": "pool-h100-7", "engine": {"version": "0.14.0"}}
    run.telemetry = {"measured": False, "reason": "no nvidia-smi on the host"}
    run.save()
    html = rita_client.get(reverse("review:run", args=[run.pk])).content.decode()
    probe = html.split('data-probe="cached_tokens_reported"')[1].split("</article>")[0]
    assert "--enable-prompt-tokens-details" in probe and "<code>usage.prompt_tokens</code>" in probe
    assert "<code>runner.engine.version</code></th><td>0.14.0" in html
    assert "<code>telemetry.reason</code></th><td>no nvidia-smi on the host" in html


@pytest.mark.django_db
def test_secrets_in_a_config_never_reach_the_run_page_or_its_diff(rita_client, cast):
    previous = make_reviewable(org=cast.org_a, config={**CONFIG, "env": {"HF_TOKEN": "hf_old"}})
    config = {**CONFIG, "env": {"HF_TOKEN": "hf_s3cr3t", "X": "1"}}
    sub = make_reviewable(org=cast.org_a, config=config, previous=previous)
    html = rita_client.get(reverse("review:submission", args=[sub.pk])).content.decode()
    assert "hf_s3cr3t" not in html and "hf_old" not in html
    assert "[redacted]" in html
    assert "<code>env.X</code>" in html


@pytest.mark.django_db
def test_marking_notifications_read_touches_only_the_users_own_orgs(cast):
    from review.services import notification_mark_read
    from submissions.selectors import notification_unread_count

    review_request_changes(submission=make_reviewable(org=cast.org_a), actor=cast.rita, reason="a")
    review_request_changes(submission=make_reviewable(org=cast.org_b), actor=cast.rita, reason="b")
    assert notification_unread_count(user=cast.alice) == 1
    assert notification_mark_read(user=cast.alice) == 1
    assert notification_unread_count(user=cast.alice) == 0
    assert notification_unread_count(user=cast.bob) == 1


@pytest.mark.django_db
def test_the_trial_timeline_reads_the_stored_records_and_refuses_unreadable_ones(rita_client, cast):
    from runs.models import BenchmarkRun, Trial
    from submissions.models import Artifact
    from submissions.services.artifacts import artifact_store

    sub = make_reviewable(org=cast.org_a, artifacts=True)
    run = BenchmarkRun.objects.get(submission=sub)
    url = reverse("review:run-timeline", args=[run.pk, 0])
    answer = rita_client.get(url)
    assert answer.status_code == 200, answer.content
    assert [(s["agent_id"], s["session_id"]) for s in answer.json()["sessions"]] == [(0, "s0")]
    # records that are not request records: a clear 404 naming the cause, never a 500
    key = f"test-review/unreadable-{run.pk}/trial-0/requests.jsonl"
    artifact_store(
        kind=Artifact.KIND_RAW_RECORDS,
        key=key,
        content=b'{"ok": true}\n',
        content_type="application/x-ndjson",
        org=sub.org,
        run=run,
    )
    Trial.objects.filter(run=run, index=0).update(raw_records_key=key, raw_records_sha256="")
    answer = rita_client.get(url)
    assert answer.status_code == 404
    message = answer.json()["error"]["message"]
    assert "unreadable" in message and "agent_id" in message
