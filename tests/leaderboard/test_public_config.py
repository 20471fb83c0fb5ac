"""The public config of a result (docs/security.md "Secrets in configs"): withheld once the
result is invalidated, rewritten by a reviewer's audited `redact` on the result page, the
public API and the next dump; and the review console highlights suspicious strings before a
publish."""

from __future__ import annotations

import copy
import json
import urllib.request
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from demo.synthetic import make_published_result
from leaderboard.configview import REDACTED
from leaderboard.redaction import REDACT_ACTION
from review.services import review_invalidate
from submissions.models import AuditEvent
from tests.review.builders import make_reviewable
from tests.submissions.configs import example

pytestmark = pytest.mark.django_db

# below the refusal threshold: stored and published as given, suspicious to the reviewer
SUSPICIOUS = "DeepseekV3ForCausalLMNextN7"


def _config() -> dict:
    doc = copy.deepcopy(example("process"))
    doc["launch"]["args"] += ["--json-model-override-args", json.dumps({"arch": SUSPICIOUS})]
    return json.loads(json.dumps(doc, default=str))


def _dump(client) -> str:
    call_command("export_public", stdout=StringIO())
    with urllib.request.urlopen(client.get("/data/latest/results.json")["Location"]) as f:
        return f.read().decode()


def _surfaces(client, pk: int) -> tuple[str, dict, str]:
    page = client.get(f"/results/{pk}/").content.decode()
    api = client.get(f"/api/v1/public/results/{pk}/").json()
    return page, api, _dump(client)


def test_an_invalidated_result_no_longer_serves_its_config(
    client, cast, django_capture_on_commit_callbacks
):
    result = make_published_result(config=_config())
    page, api, dump = _surfaces(client, result.pk)
    assert "--ctx-per-slot" in page and api["config"]["launch"]["args"] and "--ctx-per-slot" in dump
    with django_capture_on_commit_callbacks(execute=True):  # the page cache is bumped on commit
        review_invalidate(submission=result.submission, actor=cast.rita, reason="wrong weights")
    page, api, dump = _surfaces(client, result.pk)
    assert "invalidated" in page and "--ctx-per-slot" not in page
    assert "no longer published" in page
    assert api["config"] is None
    assert "--ctx-per-slot" not in dump
    assert next(r for r in json.loads(dump)["results"] if r["id"] == result.pk)["config"] is None


def test_an_invalidation_writes_a_new_dump_at_once(
    client, cast, monkeypatch, django_capture_on_commit_callbacks
):
    """The finding: the dump served an invalidated result's config until the next export.
    The status change queues a new dump (run here in-process where the worker would)."""
    from leaderboard import tasks

    ran: list[object] = []
    task = tasks.export_public_dump
    monkeypatch.setattr(task, "apply_async", lambda *a, **kw: ran.append(task.apply().get()))
    result = make_published_result(config=_config())
    assert "--ctx-per-slot" in _dump(client)  # a dump exists, with the config
    with django_capture_on_commit_callbacks(execute=True):
        review_invalidate(submission=result.submission, actor=cast.rita, reason="wrong weights")
    assert len(ran) == 1 and ran[0]  # the folder of the new bundle
    with urllib.request.urlopen(client.get("/data/latest/results.json")["Location"]) as f:
        dump = json.loads(f.read())
    assert next(r for r in dump["results"] if r["id"] == result.pk)["config"] is None


def test_a_reviewer_redacts_a_published_value_everywhere_with_a_reason_audited(
    client, cast, django_capture_on_commit_callbacks
):
    result = make_published_result(config=_config())
    index = len(_config()["launch"]["args"]) - 1
    path = f"launch.args.{index}"
    assert SUSPICIOUS in client.get(f"/results/{result.pk}/").content.decode()
    rita = client.__class__()
    rita.force_login(cast.rita)
    detail = rita.get(reverse("review:submission", args=[result.submission_id])).content.decode()
    assert f'data-path="{path}"' in detail and f"<mark>{SUSPICIOUS}</mark>" in detail
    with django_capture_on_commit_callbacks(execute=True):
        response = rita.post(
            reverse("review:decide", args=[result.submission_id, "redact"]),
            {"redact-reason": "an internal model name", "redact-paths": path},
        )
    assert response.status_code == 302, response.content[:500]
    page, api, dump = _surfaces(client, result.pk)
    assert SUSPICIOUS not in page and SUSPICIOUS not in json.dumps(api) and SUSPICIOUS not in dump
    assert api["config"]["launch"]["args"][index] == REDACTED
    assert api["config"]["launch"]["args"][index - 1] == "--json-model-override-args"
    event = AuditEvent.objects.get(action=REDACT_ACTION)
    assert event.reason == "an internal model name" and event.actor_label == "rita"
    assert event.data == {"result_id": result.pk, "paths": [path]}
    # the vendor's own record is untouched
    result.submission.refresh_from_db()
    assert SUSPICIOUS in json.dumps(result.submission.config)


def test_a_redacted_number_or_section_leaves_every_surface_answering(
    client, cast, django_capture_on_commit_callbacks
):
    """A reviewer may redact a role's worker count or a whole section: the result page shows
    the redacted config without its roles table, never a server error."""
    result = make_published_result(config=_config())
    rita = client.__class__()
    rita.force_login(cast.rita)
    with django_capture_on_commit_callbacks(execute=True):
        response = rita.post(
            reverse("review:decide", args=[result.submission_id, "redact"]),
            {
                "redact-reason": "internal layout",
                "redact-paths": "topology.roles.0.workers\nengine",
            },
        )
    assert response.status_code == 302, response.content[:500]
    page = client.get(f"/results/{result.pk}/")
    api = client.get(f"/api/v1/public/results/{result.pk}/")
    assert page.status_code == 200 and api.status_code == 200
    assert api.json()["config"]["engine"] == REDACTED
    assert api.json()["config"]["topology"]["roles"][0]["workers"] == REDACTED


def test_a_redact_needs_a_reason_and_a_path_that_exists(client, cast):
    result = make_published_result(config=_config())
    client.force_login(cast.rita)
    url = reverse("review:decide", args=[result.submission_id, "redact"])
    assert client.post(url, {"redact-reason": "", "redact-paths": "notes"}).status_code == 400
    response = client.post(url, {"redact-reason": "x", "redact-paths": "launch.nope"})
    assert response.status_code == 409 and b"launch.nope" in response.content
    assert not AuditEvent.objects.filter(action=REDACT_ACTION).exists()


def test_a_vendor_cannot_redact(client, cast):
    result = make_published_result(config=_config(), org=cast.org_b)
    client.force_login(cast.alice)
    url = reverse("review:decide", args=[result.submission_id, "redact"])
    response = client.post(url, {"redact-reason": "x", "redact-paths": "notes"})
    assert response.status_code in (302, 403)
    assert not AuditEvent.objects.filter(action=REDACT_ACTION).exists()


def test_the_console_highlights_suspicious_strings_before_a_publish(client, cast):
    sub = make_reviewable(org=cast.org_a, config=_config())
    client.force_login(cast.rita)
    page = client.get(reverse("review:submission", args=[sub.pk])).content.decode()
    assert "Strings the secret detector rated suspicious (1)" in page
    assert f"<mark>{SUSPICIOUS}</mark>" in page
    assert 'data-action="publish"' in page


def test_redacting_twice_changes_nothing():
    from leaderboard.configview import redact

    doc = example("attached")
    doc["env"]["HF_TOKEN"] = {"secret": True}
    doc["notes"] = "sk-planted0123456789abcdefXYZ"
    once = redact(json.loads(json.dumps(doc, default=str)))
    assert once["notes"] == REDACTED and redact(once) == once
