"""A ladder rung may change the workload (issue #14 item 1; docs/ladders.md "Workloads"):
its run replays a chat-like private test set, its change is attributed like any other,
and its result is never ranked."""

from __future__ import annotations

import pytest
from django.core.files.storage import storages

from agentperf.engine.trajectory import dataset_from_bytes
from catalog.datasets import private_test_set
from catalog.models import WORKLOAD_CHAT, WORKLOAD_CODING
from demo.synthetic import make_org, make_tier_set
from ladders.models import Ladder
from leaderboard.models import Result
from submissions import constants as c
from submissions.models import Submission
from tests.ladders.test_ladders import BASE, FAST, _finish, body, post
from tests.submissions.support import make_catalog, token_client
from tests.support.builders import make_user

pytestmark = pytest.mark.django_db

CHAT = {"name": "chat text", "description": "the same sessions as prose", "workload": "chat"}


def test_an_unknown_workload_is_a_400_naming_the_rung() -> None:
    cat = make_catalog()
    org = make_org()
    rungs = [*body(cat)["rungs"][:1], {**CHAT, "workload": "poetry"}]
    response = post(token_client(org), body(cat, rungs=rungs))
    assert response.status_code == 400, response.content
    assert "rungs.1.workload" in response.json()["error"]["fields"]
    assert not Submission.objects.exists()


def test_the_chat_test_set_is_the_coding_sessions_labelled_prose() -> None:
    coding = private_test_set(size="small")
    chat = private_test_set(size="small", workload=WORKLOAD_CHAT)
    assert chat.pk != coding.pk and chat.version == f"{coding.version}-chat"

    with storages["datasets"].open(coding.storage_key, "rb") as fh:
        coding_set = dataset_from_bytes(fh.read())
    with storages["datasets"].open(chat.storage_key, "rb") as fh:
        chat_set = dataset_from_bytes(fh.read())
    assert [t.id for t in chat_set.trajectories] == [t.id for t in coding_set.trajectories]
    assert all(u.metadata["output_kind"] == "prose" for t in chat_set.trajectories for u in t.turns)
    assert not any("output_kind" in u.metadata for t in coding_set.trajectories for u in t.turns)
    assert chat_set.metadata["workload"] == WORKLOAD_CHAT


def test_a_workload_rung_is_its_own_run_attributed_and_never_ranked(
    client, tasks_in_process, django_capture_on_commit_callbacks
) -> None:
    cat = make_catalog()
    org = make_org()
    api = token_client(org)
    rungs = [*body(cat)["rungs"][:1], CHAT]
    response = post(api, body(cat, rungs=rungs))
    assert response.status_code == 201, response.content
    ladder = Ladder.objects.get(pk=response.json()["id"])
    forward = list(ladder.rungs.filter(order="forward"))
    assert [r.name for r in forward] == ["as shipped", "engine upgrade", "chat text"]
    # the chat rung's config is the rung before's, yet it is another submission and run
    assert forward[2].config == forward[1].config
    assert forward[2].submission_id != forward[1].submission_id
    assert forward[2].config_sha256 != forward[1].config_sha256
    workloads = [r.submission.workload for r in forward]
    assert workloads == [WORKLOAD_CODING, WORKLOAD_CODING, WORKLOAD_CHAT]

    # dispatch gives the chat rung the chat test set
    from runs.dispatch import run_prepare

    tiers = make_tier_set()
    run, _ = run_prepare(submission=forward[2].submission)
    assert run.dataset.version.endswith("-chat")
    run.delete()

    slow_chat = [(n, s * 0.8, t * 0.8, ttft) for n, s, t, ttft in FAST]
    points = {forward[0].submission_id: BASE, forward[2].submission_id: slow_chat}
    with django_capture_on_commit_callbacks(execute=True):  # the refresh task, eagerly
        for rung in forward:
            _finish(
                Submission.objects.get(pk=rung.submission_id),
                points.get(rung.submission_id, FAST),
                tiers,
            )
    detail = api.get(f"/api/v1/ladders/{ladder.pk}/").json()
    assert detail["status"] == "in_review"
    rows = detail["attribution"]["orders"]["forward"]["rungs"]
    # the workload change is attributed like any other: chat loses a fifth of the speed
    assert rows[2]["single_agent_speed"]["gain"]["estimate"] == pytest.approx(180 * 0.8 - 180)

    client.force_login(make_user("rev", staff=True))
    client.post(f"/review/ladders/{ladder.pk}/", {"action": "publish", "reason": "ok"})
    client.logout()
    ladder.refresh_from_db()
    assert ladder.status == Ladder.STATUS_PUBLISHED
    chat_result = Result.objects.get(submission_id=forward[2].submission_id)
    assert chat_result.workload == WORKLOAD_CHAT
    ranked = set(Result.objects.public(include_simulated=True).values_list("pk", flat=True))
    assert chat_result.pk not in ranked
    assert Result.objects.get(submission_id=forward[1].submission_id).pk in ranked
    page = client.get(f"/results/{chat_result.pk}/").content.decode()
    assert 'id="workload"' in page and "Workload: chat" in page
    ladder_page = client.get(f"/ladders/{ladder.pk}/").content.decode()
    assert 'id="workloads"' in ladder_page and "chat text" in ladder_page
    assert Submission.objects.get(pk=forward[2].submission_id).status == c.PUBLISHED


DECODE = {
    "name": "long reasoning",
    "description": "the decode-heavy sessions",
    "workload": "decode-heavy",
}


def test_the_decode_heavy_test_set_has_long_outputs_and_its_own_sessions() -> None:
    from agentperf.engine.datasets.stats import dataset_stats
    from catalog.models import WORKLOAD_DECODE_HEAVY

    coding = private_test_set(size="small")
    heavy = private_test_set(size="small", workload=WORKLOAD_DECODE_HEAVY)
    assert heavy.version == f"{coding.version}-decode-heavy" and heavy.sha256 != coding.sha256
    with storages["datasets"].open(heavy.storage_key, "rb") as fh:
        heavy_set = dataset_from_bytes(fh.read())
    with storages["datasets"].open(coding.storage_key, "rb") as fh:
        coding_set = dataset_from_bytes(fh.read())
    assert heavy_set.metadata["workload"] == WORKLOAD_DECODE_HEAVY
    assert heavy_set.metadata["shape"]["output_min"] == 256  # the small size's shape
    heavy_out = dataset_stats(heavy_set).output_tokens
    coding_out = dataset_stats(coding_set).output_tokens
    assert heavy_out.min >= 256 and heavy_out.max <= 2_048
    assert heavy_out.p50 > 5 * coding_out.p50
    assert all(
        u.metadata["output_kind"] == "prose" for t in heavy_set.trajectories for u in t.turns
    )


def test_a_decode_heavy_rung_runs_on_its_tier_set_and_is_attributed_never_ranked(
    client, tasks_in_process, django_capture_on_commit_callbacks
) -> None:
    from catalog.models import WORKLOAD_DECODE_HEAVY
    from catalog.services import catalog_seed, default_tier_set_for
    from runs.dispatch import run_prepare

    catalog_seed()  # the catalog's tier sets: the default and the decode-heavy set
    default = default_tier_set_for()
    assert default is not None and default.slug == "agentperf-default-v1"
    cat = make_catalog()
    org = make_org()
    api = token_client(org)
    response = post(api, body(cat, rungs=[*body(cat)["rungs"][:1], DECODE]))
    assert response.status_code == 201, response.content
    ladder = Ladder.objects.get(pk=response.json()["id"])
    forward = list(ladder.rungs.filter(order="forward"))
    assert [r.submission.workload for r in forward] == [
        WORKLOAD_CODING,
        WORKLOAD_CODING,
        WORKLOAD_DECODE_HEAVY,
    ]
    # dispatch: the decode-heavy test set and tier set for that rung, the default for coding
    heavy_run, _ = run_prepare(submission=forward[2].submission)
    assert heavy_run.dataset.version.endswith("-decode-heavy")
    assert heavy_run.tier_set.slug == "agentperf-decode-heavy-v1"
    assert heavy_run.run_spec["tiers"][0]["name"] == "sustained 20 tok/s"
    assert all(t["max_ttft_s"] == 30 for t in heavy_run.run_spec["tiers"])
    coding_run, _ = run_prepare(submission=forward[0].submission)
    assert coding_run.tier_set.slug == "agentperf-default-v1"
    heavy_run.delete()
    coding_run.delete()

    # long outputs: the change keeps half of its single-agent gain on decode-heavy work;
    # the decode-heavy rung's run is judged by its own tier set, as dispatch gave it
    decode = [(n, s * 0.9, t * 0.5, ttft) for n, s, t, ttft in FAST]
    points = {forward[0].submission_id: BASE, forward[2].submission_id: decode}
    heavy_set = heavy_run.tier_set
    with django_capture_on_commit_callbacks(execute=True):  # the refresh task, eagerly
        for rung in forward:
            _finish(
                Submission.objects.get(pk=rung.submission_id),
                points.get(rung.submission_id, FAST),
                heavy_set if rung.submission.workload == WORKLOAD_DECODE_HEAVY else default,
            )
    detail = api.get(f"/api/v1/ladders/{ladder.pk}/").json()
    rows = detail["attribution"]["orders"]["forward"]["rungs"]
    assert rows[2]["single_agent_speed"]["gain"]["estimate"] == pytest.approx(180 * 0.9 - 180)
    # its trials carry verdicts of its own tiers; on the ladder's (the default) tiers they
    # are judged from their measured speed and TTFT, so its max agents compare with the
    # rungs before: 162 tok/s at N=1, 99 at N=8, 36 at N=32 (TTFT 0.2-1 s)
    assert set(rows[2]["trials"][0]["verdicts"]) == {t.name for t in heavy_set.tiers.all()}
    maxima = {name: m["max_agents"] for name, m in rows[2]["max_agents"].items()}
    assert maxima == {"20 tok/s": 32, "60 tok/s": 8, "100 tok/s": 1, "180 tok/s": 0, "300 tok/s": 0}

    client.force_login(make_user("rev", staff=True))
    client.post(f"/review/ladders/{ladder.pk}/", {"action": "publish", "reason": "ok"})
    client.logout()
    heavy = Result.objects.get(submission_id=forward[2].submission_id)
    assert heavy.workload == WORKLOAD_DECODE_HEAVY
    ranked = set(Result.objects.public(include_simulated=True).values_list("pk", flat=True))
    assert heavy.pk not in ranked
    page = client.get(f"/results/{heavy.pk}/").content.decode()
    assert 'id="workload"' in page and "Workload: decode-heavy" in page
    assert "long reasoning outputs" in page
    ladder_page = client.get(f"/ladders/{ladder.pk}/").content.decode()
    assert "long reasoning" in ladder_page and "decode-heavy" in ladder_page
