"""Uncertainty drawn (issue 16 item 2) and the per-session timeline (item 3), below the
browser: the engine's throughput interval, what publishing carries to points and tier
brackets, the chart's error bars, the public API, and the timeline reader and endpoints."""

from __future__ import annotations

import json

import orjson
import pytest
from django.urls import reverse

from agentperf import contract
from agentperf.engine.metrics import NS, summarize
from agentperf.engine.stats import throughput_interval
from agentperf.engine.trial import TierVerdict
from leaderboard import charts
from leaderboard.pages.common import bracket_text
from leaderboard.publishing import tier_brackets
from leaderboard.result_documents import TierBracket
from runs import timeline
from tests.support.records import (
    WARMUP_S,
    WINDOW_S,
    Shape,
    make_result_with_records,
    session_records,
)

W0, W1 = int(WARMUP_S * NS), int((WARMUP_S + WINDOW_S) * NS)
SHAPES = [
    Shape(1, 220, 0.5),
    Shape(4, 160, 0.8),
    Shape(16, 110, 2.0),
    Shape(32, 45, 6.0),
    Shape(16, 110, 2.0),
]


def test_throughput_interval_is_seeded_and_brackets_the_summary_throughput():
    records = session_records(Shape(16, 100, 1.0), seed=3)
    summary = summarize(records, window_start_ns=W0, window_end_ns=W1, accelerators=8)
    a = throughput_interval(records, window_start_ns=W0, window_end_ns=W1, accelerators=8, seed=1)
    b = throughput_interval(records, window_start_ns=W0, window_end_ns=W1, accelerators=8, seed=1)
    assert a.estimate == pytest.approx(summary.throughput_per_accelerator, rel=1e-9)
    assert a.low < a.estimate < a.high
    assert (a.low, a.high) == (b.low, b.high)
    # half the accelerators, twice the throughput per accelerator and its bounds
    c = throughput_interval(records, window_start_ns=W0, window_end_ns=W1, accelerators=4, seed=1)
    assert c.low == pytest.approx(2 * a.low) and c.high == pytest.approx(2 * a.high)


def test_a_lone_session_has_no_spread_to_resample():
    records = [r for r in session_records(Shape(4, 100, 1.0), seed=2) if r.agent_id == 0]
    records = [r for r in records if r.session_id == records[0].session_id]
    one = throughput_interval(records, window_start_ns=W0, window_end_ns=W1, accelerators=1)
    assert one.low == one.high == one.estimate and one.resamples == 0


@pytest.fixture
def result(db):
    return make_result_with_records(shapes=SHAPES, label="Measured with records")


def test_every_published_point_carries_its_bootstrap_intervals(result):
    assert len(result.points) == len(SHAPES)
    for p in result.points:
        speed, thr = p["intervals"]["p25_speed"], p["intervals"]["throughput_per_accelerator"]
        assert speed["low"] <= p["p25_speed"] <= speed["high"]
        assert thr["low"] <= p["throughput_per_accelerator"] <= thr["high"]
        assert thr["high"] > thr["low"] and speed["confidence"] == 0.95


def test_tier_brackets_hold_highest_pass_lowest_fail_and_confirmation(result):
    b = result.brackets
    # 60 tok/s: passes at 1, 4, 16 (twice), fails at 32 → bracket 16 … 32, confirmed
    assert b["60 tok/s"]["highest_pass"] == 16 == result.max_agents["60 tok/s"]
    assert b["60 tok/s"]["lowest_fail"] == 32 and b["60 tok/s"]["confirmed"] is True
    # 20 tok/s never failed up to the cap
    assert b["20 tok/s"]["lowest_fail"] is None and "capped" in b["20 tok/s"]["flags"]
    # 300 tok/s failed even at one agent
    assert b["300 tok/s"] == {
        "highest_pass": 0,
        "lowest_fail": 1,
        "confirmed": False,
        "marginal": False,
        "flags": [],
    }
    assert bracket_text(result.tier_brackets["60 tok/s"]) == "16 … 32 · confirmed"


def _v(passed: bool, *, marginal: bool) -> dict:
    """The engine's verdict as the worker stores it (agentperf/contract.py TierVerdict)."""
    return contract.TierVerdict.of(TierVerdict(passed=passed, marginal=marginal)).dump()


class _Trial:
    def __init__(self, index, n, phase, verdicts):
        self.index, self.concurrency, self.phase, self.verdicts = index, n, phase, verdicts


def test_a_marginal_verdict_at_a_bound_flags_the_bracket():
    trials = [
        _Trial(0, 1, "ramp", {"t": _v(True, marginal=False)}),
        _Trial(1, 2, "ramp", {"t": _v(True, marginal=False)}),
        _Trial(2, 4, "ramp", {"t": _v(False, marginal=True)}),
        _Trial(3, 8, "ramp", {"t": _v(False, marginal=False)}),
    ]
    b = tier_brackets({}, trials, ["t"])["t"]
    assert (b["highest_pass"], b["lowest_fail"], b["marginal"]) == (2, 4, True)
    assert "marginal" in b["flags"]
    assert bracket_text(TierBracket.model_validate(b)).endswith("marginal")
    # the same marginal verdict away from the bracket flags nothing
    trials[2].verdicts = {"t": _v(False, marginal=False)}
    trials[3].verdicts = {"t": _v(False, marginal=True)}
    assert tier_brackets({}, trials, ["t"])["t"]["marginal"] is False


def test_the_frontier_trace_draws_asymmetric_error_bars_on_both_axes(result):
    trace = charts.frontier_figure([charts.result_series(result)])["data"][0]
    points = sorted(result.points, key=lambda p: (p["concurrency"], p["index"]))
    for i, p in enumerate(points):
        iv = p["intervals"]
        assert trace["error_x"]["array"][i] == pytest.approx(
            iv["p25_speed"]["high"] - p["p25_speed"]
        )
        assert trace["error_x"]["arrayminus"][i] == pytest.approx(
            p["p25_speed"] - iv["p25_speed"]["low"]
        )
        t = iv["throughput_per_accelerator"]
        assert trace["error_y"]["array"][i] == pytest.approx(
            t["high"] - p["throughput_per_accelerator"]
        )
    assert trace["error_x"]["visible"] and trace["error_y"]["visible"]


def test_points_without_intervals_draw_no_error_bars(db):
    from demo.synthetic import make_published_result

    plain = make_published_result()
    trace = charts.frontier_figure([charts.result_series(plain)])["data"][0]
    assert trace["error_x"]["visible"] is False and set(trace["error_y"]["array"]) == {None}


def test_public_api_serves_brackets_and_point_intervals(client, result):
    data = client.get(f"/api/v1/public/results/{result.pk}/").json()
    assert data["max_agents_brackets"]["60 tok/s"]["lowest_fail"] == 32
    assert all("throughput_per_accelerator" in p["intervals"] for p in data["points"])
    listing = client.get("/api/v1/public/results/").json()
    assert listing[0]["max_agents_brackets"] == result.brackets


def test_result_model_and_compare_pages_show_brackets(client, result):
    page = client.get(reverse("result-detail", args=[result.pk])).content.decode()
    assert "Highest pass" in page and "Lowest fail" in page
    model_page = client.get(reverse("model-detail", args=[result.model.slug])).content.decode()
    assert "16 … 32 · confirmed" in model_page
    csv = client.get(
        reverse("model-detail", args=[result.model.slug]), {"format": "csv", "table": "points"}
    ).content.decode()
    assert "p25_speed_low" in csv.splitlines()[0]
    hw = client.get(reverse("hardware-detail", args=[result.hardware.slug])).content.decode()
    assert "16 … 32 · confirmed" in hw
    other = make_result_with_records(shapes=SHAPES[:3], model=result.model, label="Other")
    cmp = client.get(reverse("compare") + f"?r={result.pk}&r={other.pk}").content.decode()
    assert "16 … 32 · confirmed" in cmp and "16 … no fail" in cmp


# --- timeline ------------------------------------------------------------------------


def _url(result, index):
    return f"/api/v1/public/results/{result.pk}/trials/{index}/timeline/"


def test_timeline_lists_a_trials_sessions_a_page_at_a_time(client, result):
    first = client.get(_url(result, 2), {"limit": 5}).json()
    assert first["concurrency"] == 16 and len(first["sessions"]) == 5
    rest = client.get(_url(result, 2), {"offset": 5, "limit": 200}).json()
    assert first["count"] == rest["count"] == 5 + len(rest["sessions"])
    agents = {s["agent_id"] for s in first["sessions"] + rest["sessions"]}
    assert agents == set(range(16))


def test_timeline_turns_come_from_the_stored_records(client, result):
    from runs.models import Trial

    trial = Trial.objects.get(run=result.run, index=1)
    records = [orjson.loads(line) for line in timeline.record_lines(trial.raw_records_key)]
    mine = [r for r in records if r["agent_id"] == 2]
    session = mine[0]["session_id"]
    mine = [r for r in mine if r["session_id"] == session]
    data = client.get(_url(result, 1), {"agent": 2, "session": session, "limit": 3}).json()
    turns = data["turns"]
    assert [t["turn_index"] for t in turns] == [r["turn_index"] for r in mine[:3]]
    assert data["more"] is (len(mine) > 3)
    r0, r1 = mine[0], mine[1]
    assert turns[0]["send_s"] == pytest.approx((r0["t_send_ns"] - W0) / NS)
    assert turns[0]["ttft_s"] == pytest.approx((r0["t_first_ns"] - r0["t_send_ns"]) / NS)
    assert turns[0]["tool_delay_s"] == pytest.approx((r1["t_send_ns"] - r0["t_end_ns"]) / NS)
    assert turns[1]["n_cached"] == r1["n_cached"] > 0 and turns[1]["n_out"] == r1["n_out"]
    # the last turn of a page still knows its tool delay (the next page's first send)
    if data["more"]:
        assert turns[2]["tool_delay_s"] == pytest.approx(
            (mine[3]["t_send_ns"] - mine[2]["t_end_ns"]) / NS
        )
    page2 = client.get(_url(result, 1), {"agent": 2, "session": session, "offset": 3}).json()
    assert [t["turn_index"] for t in page2["turns"]] == [r["turn_index"] for r in mine[3:]]


def test_the_turns_page_stops_reading_once_it_is_full(result, monkeypatch):
    from runs.models import Trial

    trial = Trial.objects.get(run=result.run, index=3)  # 32 agents
    monkeypatch.setattr(timeline, "CHUNK", 256)
    seen = []
    real = timeline._chunks

    def counting(key):
        for chunk in real(key):
            seen.append(len(chunk))
            yield chunk

    monkeypatch.setattr(timeline, "_chunks", counting)
    first = timeline.trial_sessions(trial, timeline.Page(0, 1))["sessions"][0]
    whole = len(seen)
    seen.clear()
    timeline.session_timeline(
        trial, agent=first["agent_id"], session=first["session_id"], page=timeline.Page(0, 1)
    )
    assert whole > 40 and len(seen) < whole / 4  # the first session's turns are early


@pytest.mark.parametrize(
    ("params", "field", "status"),
    [
        ({"limit": "0"}, "limit", 400),
        ({"limit": "201"}, "limit", 400),
        ({"offset": "-1"}, "offset", 400),
        ({"offset": "x"}, "offset", 400),
        ({"agent": "abc", "session": "a0s0"}, "agent", 400),
        ({"agent": "1"}, "session", 400),
        ({"agent": "1", "session": "nope"}, "session", 404),
    ],
)
def test_bad_timeline_parameters_are_4xx_naming_the_field(client, result, params, field, status):
    response = client.get(_url(result, 0), params)
    assert response.status_code == status
    assert field in response.json()["error"]["fields"]


def test_timeline_of_a_missing_trial_or_result_is_404(client, result):
    assert client.get(_url(result, 99)).status_code == 404
    assert (
        client.get(f"/api/v1/public/results/{result.pk + 999}/trials/0/timeline/").status_code
        == 404
    )


def test_review_timeline_is_for_reviewers_only(client, cast, result):
    url = reverse("review:run-timeline", args=[result.run_id, 0])
    assert client.get(url).status_code == 302  # to the login page
    client.force_login(cast.alice)
    assert client.get(url).status_code == 403
    client.force_login(cast.rita)
    data = client.get(url, {"limit": 2}).json()
    assert data["count"] >= 2 and {s["agent_id"] for s in data["sessions"]} == {0}
    bad = client.get(url, {"limit": "zero"})
    assert bad.status_code == 400 and "limit" in json.loads(bad.content)["error"]["fields"]
    page = client.get(reverse("review:run", args=[result.run_id])).content.decode()
    assert "data-timeline" in page and "/timeline.json" in page
