"""A ladder end to end through the real parts (docs/ladders.md): vendor API → one
submission per distinct rung → dispatch → RabbitMQ → a database-free pool worker (the
simulator on virtual time) → runner API → SeaweedFS → verification → attribution from the
stored trials and raw records (the ladders.refresh task, on a web-queue worker) → one review
publishing every rung → the public page, API and CSV."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from ladders.models import Ladder
from submissions.models import Submission
from tests.pipeline.conftest import EXAMPLES, http

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_ladder_runs_every_rung_and_is_published_after_one_review(
    pipeline_settings, live_server, vendor, pool_worker_factory, client, celery_worker
):
    org, token = vendor
    pool_worker_factory(pools=("simulated",))
    baseline = yaml.safe_load((EXAMPLES / "simulated.yaml").read_text())
    body = {
        "name": "H100 what-if (CI)",
        "baseline": {"name": "as submitted", "config": baseline},
        "rungs": [
            {
                "name": "engine bump",
                "description": "a version label the twin ignores",
                "patch": {"engine": {"version": "0.5.5"}},
            },
        ],
        "orders": ["forward", "reverse"],
    }
    started = time.monotonic()
    status, created = http(
        "POST", f"{live_server.url}/api/v1/ladders/", token=token, body=json.dumps(body).encode()
    )
    assert status == 201, created
    assert len({r["submission"] for r in created["rungs"]}) == 2  # 4 rungs, 2 configs
    deadline = time.monotonic() + 900
    detail: dict = {}
    while time.monotonic() < deadline:
        status, detail = http(
            "GET", f"{live_server.url}/api/v1/ladders/{created['id']}/", token=token
        )
        assert status == 200, detail
        if detail["status"] != "running":
            break
        time.sleep(2.0)
    print(f"ladder e2e: submitted to in_review in {time.monotonic() - started:.1f} s")
    assert detail["status"] == "in_review", detail
    rows = detail["attribution"]["orders"]["forward"]["rungs"]
    assert [r["name"] for r in rows] == ["as submitted", "engine bump"]
    # the change is a label only: same seed, same sessions, the same measurement
    first_tier = next(iter(rows[1]["speeds"]))
    gain = rows[1]["speeds"][first_tier].get("gain") or {}
    assert gain.get("estimate") in (0, 0.0, None)
    # intervals came from the raw records read back from storage
    base = rows[0]["speeds"][first_tier]["throughput_per_accelerator"]
    assert base["estimate"] is None or base["low"] is not None
    assert rows[0]["server_metrics"]["scraped"] is True

    from tests.support.builders import make_user

    reviewer = make_user("lena", staff=True)
    client.force_login(reviewer)
    page = client.get(f"/review/ladders/{created['id']}/")
    assert page.status_code == 200 and b"request_accounting" in page.content
    client.post(f"/review/ladders/{created['id']}/", {"action": "publish", "reason": "ok"})
    ladder = Ladder.objects.get(pk=created["id"])
    assert ladder.status == Ladder.STATUS_PUBLISHED
    subs = Submission.objects.filter(pk__in=[r["submission"] for r in created["rungs"]])
    assert {s.status for s in subs} == {"published"}
    client.logout()
    html = client.get(f"/ladders/{ladder.pk}/").content.decode()
    assert '"type": "waterfall"' in html and "engine bump" in html
    status, public = http("GET", f"{live_server.url}/api/v1/public/ladders/{ladder.pk}/")
    assert status == 200 and public["attribution"]["orders"]["reverse"]["rungs"][1]["result"]
    assert client.get(f"/ladders/{ladder.pk}/ladder.csv").status_code == 200
