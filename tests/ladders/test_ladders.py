"""Ladders on the platform (docs/ladders.md): the vendor API validates every rung and names
the rung and field; each distinct rung config becomes one submission (reused when already
verified); once every rung's run is verified the attribution is computed, one review
publishes the ladder and its rungs, and the public page, API and CSV carry it."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from demo.synthetic import make_org, make_run, make_tier_set
from ladders.models import Ladder, LadderRung
from ladders.services import ladder_refresh
from submissions import constants as c
from submissions.models import Submission
from submissions.services.lifecycle import submission_transition
from tests.submissions.support import make_catalog, token_client
from tests.support.builders import make_user

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def body(cat, **over):
    doc = {
        "name": "tiny what-if",
        "description": "two changes on the tiny simulated system",
        "baseline": {"name": "as shipped", "config": cat.config()},
        "rungs": [
            {
                "name": "engine upgrade",
                "description": "newer engine",
                "patch": {"engine": {"version": "0.5.5"}},
            },
            {"name": "no notes", "description": "drop the notes", "patch": {"notes": None}},
        ],
        "speeds": [50],
    }
    doc.update(over)
    return doc


def post(client, doc):
    return client.post("/api/v1/ladders/", json.dumps(doc), content_type="application/json")


@pytest.mark.parametrize(
    ("rungs", "field"),
    [
        (
            [{"name": "x", "description": "d", "patch": {"speculative": {"draft_tokens": -1}}}],
            "rungs.0.patch.speculative",
        ),
        (
            [{"name": "x", "description": "d", "patch": {"benchmark": {"max_concurrency": 8}}}],
            "rungs.0.patch.benchmark.max_concurrency",
        ),
        (
            [
                {"name": "x", "description": "d", "patch": {"engine": {"version": "1"}}},
                {"name": "y", "description": "d", "patch": {"topology": {"mode": "bogus"}}},
            ],
            "rungs.1.patch.topology",
        ),
        ([{"name": "x", "description": "d", "patch": []}], "rungs.0.patch"),
        ([{"name": "x", "patch": {"notes": "n"}}], "rungs.0.description"),
    ],
)
def test_a_bad_rung_is_a_400_naming_the_rung_and_field(rungs, field) -> None:
    cat = make_catalog()
    org = make_org()
    response = post(token_client(org), body(cat, rungs=rungs))
    assert response.status_code == 400, response.content
    fields = response.json()["error"]["fields"]
    assert any(k.startswith(field) for k in fields), fields
    assert not Ladder.objects.exists() and not Submission.objects.exists()


def test_bad_baseline_and_orders_are_named() -> None:
    cat = make_catalog()
    client = token_client(make_org())
    assert (
        "baseline.result"
        in post(client, body(cat, baseline={"result": 999})).json()["error"]["fields"]
    )
    r = post(client, body(cat, orders=["reverse"]))
    assert r.status_code == 400 and "orders" in r.json()["error"]["fields"]
    r = client.post("/api/v1/ladders/", "{nope", content_type="application/json")
    assert r.status_code == 400


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"baseline": {"result": "3"}}, "baseline.result"),
        ({"speeds": ["50"]}, "speeds.0"),
        ({"orders": ["forward", "sideways"]}, "orders.1"),
        ({"colour": "red"}, "colour"),
        # the hostile finding: a ladder with 10,000 speeds was accepted
        ({"speeds": [float(50 + i) for i in range(10_000)]}, "speeds"),
    ],
)
def test_the_ladder_body_is_strict_and_names_the_field(over, field) -> None:
    """The body is a contract model (ladders/schema.py LadderBody): nothing is coerced and
    an unknown key is refused."""
    cat = make_catalog()
    response = post(token_client(make_org()), body(cat, **over))
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == [field]
    assert not Ladder.objects.exists() and not Submission.objects.exists()


def _finish(sub: Submission, points, tier_set) -> None:
    """What the pipeline does to a rung's submission: queued → … → verifying with a
    finished, verified run, then in review."""
    for to in (c.QUEUED, c.RUNNING, c.VERIFYING):
        submission_transition(submission=sub, to=to, actor_label="test pipeline")
    make_run(
        submission=sub,
        points=points,
        tier_set=tier_set,
        accelerators=1,
        verification=[{"name": "output_length", "status": "pass", "summary": "ok"}],
    )
    submission_transition(submission=sub, to=c.IN_REVIEW, actor_label="test pipeline")


BASE = [(1, 160.0, 150.0, 0.2), (8, 90.0, 700.0, 0.4), (32, 30.0, 900.0, 1.0)]
FAST = [(1, 180.0, 170.0, 0.2), (8, 110.0, 850.0, 0.4), (32, 40.0, 1100.0, 1.0)]


def test_ladder_through_api_rungs_review_and_public_page(
    client, tasks_in_process, django_capture_on_commit_callbacks
) -> None:
    cat = make_catalog()
    org = make_org()
    api = token_client(org)
    response = post(api, body(cat, orders=["forward", "reverse"]))
    assert response.status_code == 201, response.content
    created = response.json()
    ladder = Ladder.objects.get(pk=created["id"])
    forward = list(ladder.rungs.filter(order="forward"))
    reverse = list(ladder.rungs.filter(order="reverse"))
    assert [r.name for r in forward] == ["as shipped", "engine upgrade", "no notes"]
    assert [r.name for r in reverse] == ["as shipped", "no notes", "engine upgrade"]
    # baseline and final config shared by both orders: 4 distinct configs, 4 submissions
    assert forward[0].submission_id == reverse[0].submission_id
    assert forward[-1].submission_id == reverse[-1].submission_id
    subs = {r.submission_id for r in ladder.rungs.all()}
    assert len(subs) == 4 == Submission.objects.filter(org=org).count()
    assert all(Submission.objects.get(pk=s).status == c.VALIDATED for s in subs)

    tiers = make_tier_set()
    speedup = {forward[0].submission_id: BASE}
    # the last rung reaching review queues ladders.refresh on commit (run here, eagerly)
    with django_capture_on_commit_callbacks(execute=True):
        for sub_id in subs:
            _finish(Submission.objects.get(pk=sub_id), speedup.get(sub_id, FAST), tiers)
    detail = api.get(f"/api/v1/ladders/{ladder.pk}/").json()
    assert detail["status"] == "in_review"
    att = detail["attribution"]
    rows = att["orders"]["forward"]["rungs"]
    gains = [r["speeds"]["50"]["gain"]["estimate"] for r in rows[1:]]
    assert sum(gains) == pytest.approx(att["orders"]["forward"]["total_gain"]["50"]["estimate"])
    assert gains[0] > 0 and gains[1] == pytest.approx(0)  # the notes change nothing measured
    assert rows[1]["single_agent_speed"]["gain"]["estimate"] == pytest.approx(20.0)

    assert client.get(f"/ladders/{ladder.pk}/").status_code == 404  # not yet published
    reviewer = make_user("rev", staff=True)
    client.force_login(reviewer)
    page = client.get(f"/review/ladders/{ladder.pk}/")
    assert page.status_code == 200
    assert page.content.decode().count("output_length") == 4  # every rung's checks
    client.post(f"/review/ladders/{ladder.pk}/", {"action": "publish", "reason": "checks ok"})
    ladder.refresh_from_db()
    assert ladder.status == Ladder.STATUS_PUBLISHED
    assert all(Submission.objects.get(pk=s).status == c.PUBLISHED for s in subs)
    client.logout()

    html = client.get(f"/ladders/{ladder.pk}/?at=50").content.decode()
    assert '"type": "waterfall"' in html and "Order matters" in html
    assert "engine upgrade" in html
    # a reader's speed, interpolated on each rung's frontier
    api_doc = client.get(f"/api/v1/public/ladders/{ladder.pk}/?speed=100").json()
    row = api_doc["attribution"]["orders"]["forward"]["rungs"][1]["speeds"]["100"]
    # fast rung at 100 tok/s: between (110, 850) and (40, 1100); baseline: between (160,
    # 150) and (90, 700)
    assert row["throughput_per_accelerator"]["estimate"] == pytest.approx(850 + 250 / 7)
    assert row["gain"]["estimate"] == pytest.approx((850 + 250 / 7) - (700 - 550 / 7))
    assert row["read"] == "read between measured trials"  # never passed off as measured
    assert api_doc["attribution"]["orders"]["forward"]["rungs"][1]["result"] is not None
    assert client.get(f"/api/v1/public/ladders/{ladder.pk}/?speed=abc").status_code == 400
    text = client.get(f"/ladders/{ladder.pk}/ladder.csv").content.decode()
    table = list(csv.DictReader(io.StringIO(text)))
    assert {r["order"] for r in table} == {"forward", "reverse"}
    assert any(r["name"] == "engine upgrade" and r["speed"] == "50" for r in table)


def test_a_verified_config_is_reused_by_a_later_ladder() -> None:
    cat = make_catalog()
    org = make_org()
    api = token_client(org)
    first = Ladder.objects.get(pk=post(api, body(cat)).json()["id"])
    tiers = make_tier_set()
    for sub_id in {r.submission_id for r in first.rungs.all()}:
        _finish(Submission.objects.get(pk=sub_id), BASE, tiers)
    assert ladder_refresh(first).status == Ladder.STATUS_IN_REVIEW
    again = post(api, body(cat, name="again")).json()
    rungs = LadderRung.objects.filter(ladder_id=again["id"])
    assert all(r.reused for r in rungs)
    assert {r.submission_id for r in rungs} == {r.submission_id for r in first.rungs.all()}


def test_engine_ladder_import_is_published_and_labelled(client, tmp_path) -> None:
    from django.core.management import call_command

    from agentperf.ladder.measure import run_ladder
    from agentperf.ladder.spec import parse_ladder

    cat = make_catalog()
    org = make_org()
    doc = run_ladder(
        parse_ladder(
            {
                "name": "tiny engine ladder",
                "baseline": {"name": "tiny", "target": "sim:tiny"},
                "steps": [
                    {
                        "name": "HBM",
                        "description": "95% of HBM bandwidth",
                        "patch": {"deployment": {"efficiency": {"bandwidth": 0.95}}},
                    }
                ],
                "dataset": {"generate": {"seed": 1, "trajectories": 20}},
                "speeds": [100],
                "trials": {"concurrencies": [1, 8], "warmup_s": 5, "duration_s": 20, "ramp_s": 2},
                "bootstrap": {"resamples": 30},
            }
        ),
        tmp_path,
    )
    call_command(
        "ladder_import",
        str(tmp_path / "ladder.json"),
        org=org.slug,
        model=cat.model.slug,
        hardware=cat.hardware.slug,
    )
    ladder = Ladder.objects.get(source=Ladder.SOURCE_ENGINE)
    assert ladder.is_simulated and ladder.status == Ladder.STATUS_PUBLISHED
    html = client.get(f"/ladders/{ladder.pk}/").content.decode()
    assert "simulated" in html and "python -m agentperf.engine ladder" in html
    assert doc["rungs"][1]["name"] == "HBM" and "HBM" in html
    assert f"/ladders/{ladder.pk}/" in client.get("/ladders/").content.decode()


def test_demo_publishes_the_gb300_ladders_labelled_simulated(client) -> None:
    """make demo's step: the committed engine outputs of docs/examples/ladder-gb300.yaml and
    of the same six changes re-run on decode-heavy work (ladder-gb300-decode-heavy.yaml)."""
    import yaml

    from catalog.services import catalog_seed
    from demo.steps import GB300_LADDERS, _publish_gb300_ladders

    catalog_seed()
    org = make_org()
    _publish_gb300_ladders(org)
    _publish_gb300_ladders(org)  # idempotent
    assert Ladder.objects.filter(org=org).count() == len(GB300_LADDERS) == 2
    (_, coding_json), (_, heavy_json) = GB300_LADDERS
    examples = ROOT / "docs" / "examples"
    spec = yaml.safe_load((examples / "ladder-gb300.yaml").read_text())
    doc = json.loads(coding_json.read_text())
    ladder = Ladder.objects.get(org=org, name=doc["name"])
    assert ladder.is_simulated and ladder.hardware.slug == "gb300-nvl72"
    assert [c["name"] for c in doc["changes"]] == [s["name"] for s in spec["steps"]]
    assert [c["patch"] for c in doc["changes"]] == [s["patch"] for s in spec["steps"]]
    assert set(doc["orders"]) == {"forward", "reverse", "leave_one_out"}
    html = client.get(f"/ladders/{ladder.pk}/?at=82").content.decode()
    assert "Simulated" in html and "co-located prefill/decode" in html
    assert 'id="wf-forward"' in html and 'id="wf-reverse"' not in html  # one order shown
    for order in ("forward", "reverse", "leave_one_out"):
        html = client.get(f"/ladders/{ladder.pk}/?at=82&order={order}").content.decode()
        assert f'id="wf-{order}"' in html and f'<option value="{order}" selected>' in html

    # the same changes on decode-heavy work: its generated long-output dataset, its tier set
    heavy_spec = yaml.safe_load((examples / "ladder-gb300-decode-heavy.yaml").read_text())
    heavy = json.loads(heavy_json.read_text())
    assert heavy_spec["steps"] == spec["steps"] and heavy_spec["baseline"] == spec["baseline"]
    assert [c["patch"] for c in heavy["changes"]] == [s["patch"] for s in spec["steps"]]
    assert heavy["conditions"]["dataset"]["generate"]["shape"] == "decode-heavy"
    assert heavy["tier_set"] == "agentperf-decode-heavy-v1"
    assert [t["name"] for t in heavy["tiers"]][0] == "sustained 20 tok/s"
    # every rung measured: a throughput at each tier's speed on every rung
    forward = heavy["orders"]["forward"]
    assert len(forward["rungs"]) == len(spec["steps"]) + 1
    heavy_ladder = Ladder.objects.get(org=org, name=heavy["name"])
    assert heavy_ladder.is_simulated and heavy_ladder.hardware.slug == "gb300-nvl72"
    html = client.get(f"/ladders/{heavy_ladder.pk}/").content.decode()
    assert "decode-heavy" in html and "tuned speculative decoding" in html
    assert 'id="wf-forward"' in html


def test_result_and_history_pages_link_the_ladder(client) -> None:
    cat = make_catalog()
    org = make_org()
    api = token_client(org)
    ladder = Ladder.objects.get(pk=post(api, body(cat)).json()["id"])
    tiers = make_tier_set()
    for sub_id in {r.submission_id for r in ladder.rungs.all()}:
        _finish(Submission.objects.get(pk=sub_id), BASE, tiers)
    reviewer = make_user("rev2", staff=True)
    from ladders.services import ladder_review

    ladder = ladder_review(ladder=ladder, actor=reviewer, action="publish", reason="ok")
    result = ladder.rungs.first().submission.result
    link = f'href="/ladders/{ladder.pk}/"'
    assert link in client.get(f"/results/{result.pk}/").content.decode()
    history = client.get(f"/history/{cat.model.slug}/{cat.hardware.slug}/?simulated=1")
    assert link in history.content.decode()


def test_ladder_json_schema_is_served_and_accepts_the_documented_body(client) -> None:
    import jsonschema

    schema = client.get("/api/v1/schema/ladder.json").json()
    cat = make_catalog()
    doc = body(cat)
    doc["baseline"]["config"] = "see the deployment-config schema"  # YAML text form
    jsonschema.validate(doc, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**doc, "rungs": []}, schema)


def test_a_ladder_whose_rungs_were_all_withdrawn_is_listed_failed_not_running(
    client, tasks_in_process, django_capture_on_commit_callbacks
) -> None:
    """The hostile finding: the list showed "running" until someone opened the ladder. The
    withdrawal itself moves it on (ladders.refresh, queued on commit), not a read."""
    from submissions.services.submissions import submission_withdraw

    cat = make_catalog()
    org = make_org()
    vendor = token_client(org)
    created = post(vendor, body(cat))
    assert created.status_code == 201, created.content
    ladder = Ladder.objects.get(pk=created.json()["id"])
    assert ladder.status == Ladder.STATUS_RUNNING
    with django_capture_on_commit_callbacks(execute=True):
        for sub in {r.submission_id: r.submission for r in ladder.rungs.all()}.values():
            submission_withdraw(submission=sub, actor_label="vendor")
    listed = vendor.get("/api/v1/ladders/").json()["results"]
    assert [(x["id"], x["status"]) for x in listed] == [(ladder.pk, Ladder.STATUS_FAILED)]
    assert "withdrawn" in listed[0]["status_reason"]
    user = make_user("ladder-vendor", org=org)
    client.force_login(user)
    page = client.get("/portal/ladders/").content.decode()
    assert Ladder.STATUS_FAILED in page and Ladder.STATUS_RUNNING not in page


def test_reading_a_ladder_never_moves_it_on_its_rungs_transitions_do(
    client, django_capture_on_commit_callbacks
) -> None:
    """A GET is read-only (issue 37): the vendor API, the portal and the review page show a
    ladder as it is stored. The transition of a rung's submission into review queues
    `ladders.refresh` for its ladder on commit; that task moves it on."""
    from ladders.tasks import refresh_ladders

    cat = make_catalog()
    org = make_org()
    api = token_client(org)
    ladder = Ladder.objects.get(pk=post(api, body(cat)).json()["id"])
    tiers = make_tier_set()
    subs = sorted({r.submission_id for r in ladder.rungs.all()})
    with django_capture_on_commit_callbacks() as queued:  # not run: no worker yet
        for sub_id in subs:
            _finish(Submission.objects.get(pk=sub_id), BASE, tiers)
    # one refresh per rung submission that reached review (the others' states move nothing)
    assert len(queued) == len(subs)
    for path in (f"/api/v1/ladders/{ladder.pk}/", "/api/v1/ladders/"):
        assert api.get(path).status_code == 200
    user = make_user("ladder-reader", org=org)
    client.force_login(user)
    assert client.get(f"/portal/ladders/{ladder.pk}/").status_code == 200
    assert client.get("/portal/ladders/").status_code == 200
    client.force_login(make_user("ladder-reviewer", staff=True))
    assert client.get(f"/review/ladders/{ladder.pk}/").status_code == 200
    ladder.refresh_from_db()
    assert ladder.status == Ladder.STATUS_RUNNING and not ladder.attribution
    # the task the transitions queued (here, run in this process)
    assert refresh_ladders(subs[0]) == [ladder.pk]
    ladder.refresh_from_db()
    assert ladder.status == Ladder.STATUS_IN_REVIEW and ladder.attribution
    assert refresh_ladders(subs[0]) == []  # idempotent: nothing left to move on
    detail = api.get(f"/api/v1/ladders/{ladder.pk}/").json()
    assert detail["status"] == "in_review"
