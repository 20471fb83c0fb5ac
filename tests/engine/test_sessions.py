"""Session SLOs (docs/engine.md "Session SLOs"): the share of sessions that met a tier, the
whole-task model time, and the ``criterion: sessions`` rule against the request-level p25,
on hand-built record sets where the two rules disagree."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentperf import contract
from agentperf.engine.metrics import (
    NS,
    ClientHealth,
    RequestRecord,
    kaplan_meier_quantile,
    percentile,
    share_interval,
    summarize_sessions,
    whole_task_model_times,
    whole_task_observations,
)
from agentperf.engine.replay import ReplayConfig
from agentperf.engine.search import TrialOutcome, run_search
from agentperf.engine.trajectory import Dataset, Trajectory, Turn, save_dataset
from agentperf.engine.trial import Tier, TrialConfig, judge_trial, parse_tiers

W0, W1 = 0, 1000 * NS
FAST, SLOW = 100.0, 10.0  # tok/s


def rec(
    agent: int,
    session: str,
    t_send_s: float,
    *,
    speed: float = FAST,
    ttft_s: float = 0.5,
    turn: int = 1,
    n_out: int = 101,
    trajectory: str = "t",
) -> RequestRecord:
    """A successful request with the given TTFT and output speed (n_out - 1 tokens spread
    over (n_out - 1) / speed seconds after the first token)."""
    send = int(t_send_s * NS)
    first = send + int(ttft_s * NS)
    last = first + int((n_out - 1) / speed * NS)
    return RequestRecord(
        request_id=f"{session}-{t_send_s}",
        agent_id=agent,
        session_id=session,
        trajectory_id=trajectory,
        turn_index=turn,
        target_output_tokens=n_out,
        t_send_ns=send,
        t_first_ns=first,
        t_last_ns=last,
        t_end_ns=last,
        n_reads=n_out,
        n_output_events=n_out,
        n_in=1000,
        n_out=n_out,
        n_cached=0,
        local_prompt_tokens=None,
        ok=True,
    )


def sessions_of(spec: list[tuple[int, float]]) -> list[RequestRecord]:
    """One session per (requests, speed) entry, agent i with session "a{i}"."""
    out = []
    for i, (count, speed) in enumerate(spec):
        out += [rec(i, f"a{i}", 1 + i + 20 * k, speed=speed) for k in range(count)]
    return out


def tiers(share: float = 0.95) -> list[Tier]:
    base = {"name": "50", "min_p25_output_speed": 50.0, "max_ttft_s": 2.0}
    return parse_tiers(
        [
            {**base, "name": "requests"},
            {**base, "name": "sessions", "criterion": "sessions", "min_session_share": share},
        ]
    )


def judge(records: list[RequestRecord], tier_list: list[Tier], resamples: int = 200):
    config = TrialConfig(
        concurrency=1,
        warmup_s=0,
        duration_s=1000,
        accelerators=1,
        replay=ReplayConfig(model="m"),
        min_requests=1,
        bootstrap_resamples=resamples,
    )
    return judge_trial(
        records, config, tier_list, window=(W0, W1), client=ClientHealth(), simulated=True
    )


def test_request_level_passes_while_a_fifth_of_the_sessions_were_bad() -> None:
    # 5 sessions of 4 requests, one all slow: 4 of 20 requests slow, so the request p25 (the
    # 5th smallest) is fast; but only 4 of 5 sessions met the tier (80% < 95%).
    result = judge(sessions_of([(4, SLOW), (4, FAST), (4, FAST), (4, FAST), (4, FAST)]), tiers())
    assert result.summary.p25_output_speed == pytest.approx(FAST, rel=1e-3)
    assert result.verdicts["requests"].passed
    share = result.summary.sessions["tiers"]["sessions"]  # type: ignore[index]
    assert (share["met"], share["sessions"], share["share"]) == (4, 5, 0.8)
    assert not result.verdicts["sessions"].passed
    assert "4 of 5 sessions met the tier" in result.verdicts["sessions"].reasons[0]


def test_sessions_pass_while_the_request_level_p25_fails() -> None:
    # One long bad session (40 slow requests) among 19 good ones of 4: 40 of 116 requests
    # slow, so the request p25 is slow; 19 of 20 sessions (95%) met the tier.
    result = judge(sessions_of([(40, SLOW)] + [(4, FAST)] * 19), tiers())
    assert result.summary.p25_output_speed == pytest.approx(SLOW, rel=1e-3)
    assert not result.verdicts["requests"].passed
    assert result.summary.sessions["tiers"]["sessions"]["share"] == 0.95  # type: ignore[index]
    assert result.verdicts["sessions"].passed


def test_a_session_meets_a_tier_on_its_own_ttft_percentile() -> None:
    # every session fast, but one session's requests all wait 5 s for the first token
    records = sessions_of([(4, FAST)] * 3)
    records += [rec(9, "late", 3 + 20 * k, ttft_s=5.0) for k in range(4)]
    result = judge(records, tiers(share=0.5))
    share = result.summary.sessions["tiers"]["sessions"]  # type: ignore[index]
    assert (share["met"], share["sessions"]) == (3, 4)


def test_share_interval_is_a_session_bootstrap_around_the_share() -> None:
    met = [True] * 15 + [False] * 5
    low, high = share_interval(met, resamples=500, confidence=0.95, seed=3, name="x")
    assert low < 0.75 < high
    assert (low, high) == share_interval(met, resamples=500, confidence=0.95, seed=3, name="x")
    assert share_interval([True] * 10, resamples=500, confidence=0.95, seed=3, name="x") == (1, 1)


def test_a_share_whose_interval_straddles_the_minimum_is_marginal() -> None:
    # 9 of 10 sessions met: the interval around 90% holds 85%, so the verdict is marginal
    result = judge(sessions_of([(4, SLOW)] + [(4, FAST)] * 9), tiers(share=0.85))
    assert result.verdicts["sessions"].passed
    assert result.verdicts["sessions"].marginal
    # and one that does not straddle it is not
    result = judge(sessions_of([(4, FAST)] * 10), tiers(share=0.85))
    assert result.verdicts["sessions"].passed
    assert not result.verdicts["sessions"].marginal


def test_requests_outside_the_window_are_not_part_of_a_session() -> None:
    records = sessions_of([(4, FAST)] * 2) + [rec(7, "late", 2000, speed=SLOW)]
    block = summarize_sessions(records, tiers(), window_start_ns=W0, window_end_ns=W1)
    assert block["sessions"] == 2
    assert block["tiers"]["sessions"]["share"] == 1.0


def test_whole_task_model_time_counts_whole_trajectories_without_tool_delays() -> None:
    # agent 0: session s0 (turns 0-2, 1 s of model time each, 30 s of tool delays between)
    # then s1 (turn 0 only: cut at the window's end). agent 1 started mid-trajectory.
    def turn(agent: int, session: str, t: float, k: int) -> RequestRecord:
        return rec(agent, session, t, turn=k, ttft_s=0.5, speed=200.0)  # 0.5 + 0.5 s

    records = [turn(0, "s0", 10 + 31 * k, k) for k in range(3)] + [turn(0, "s1", 200, 0)]
    records += [turn(1, "m", 10 + 31 * k, k + 2) for k in range(3)] + [turn(1, "n", 300, 0)]
    times = whole_task_model_times(records, window_start_ns=W0, window_end_ns=W1)
    assert times == [pytest.approx(3.0)]
    # knowing the trajectory has 1 turn, the cut session s1 is whole too
    times = whole_task_model_times(
        [turn(0, "s1", 200, 0)], window_start_ns=W0, window_end_ns=W1, trajectory_turns={"t": 1}
    )
    assert times == [pytest.approx(1.0)]
    block = summarize_sessions(records, tiers(), window_start_ns=W0, window_end_ns=W1)
    # s1 and n began in the window and were cut at its end: censored at 1 s each, so the
    # one ended task (3 s) is the Kaplan–Meier median and p90
    assert block["whole_task_model_time_s"] == {
        "sessions": 1,
        "censored": 2,
        "median": pytest.approx(3.0),
        "p90": pytest.approx(3.0),
    }
    observed = whole_task_observations(records, window_start_ns=W0, window_end_ns=W1)
    assert sorted(observed) == [(pytest.approx(1.0), False)] * 2 + [(pytest.approx(3.0), True)]


def test_kaplan_meier_is_the_nearest_rank_percentile_without_censoring() -> None:
    times = [4.0, 1.0, 3.0, 2.0, 5.0, 2.0, 9.0]
    for q in (0.1, 0.25, 0.5, 0.9, 1.0):
        assert kaplan_meier_quantile([(t, True) for t in times], q) == percentile(times, q * 100)


def test_censored_long_tasks_raise_the_median_that_ended_tasks_alone_would_give() -> None:
    # ten tasks ended at 1..10 s would give a median of 5 s; with ten more still running at
    # 8 s (cut at the window's end), half the tasks took longer than 8 s
    ended = [(float(t), True) for t in range(1, 11)]
    cut = [(8.0, False)] * 10
    assert kaplan_meier_quantile(ended, 0.5) == 5.0
    # at risk 20, 19, …: S falls by 1/n per ended task up to 8 s, then the 10 cut ones leave
    # with 8 (events first), and 9 and 10 end among the last 2 at risk
    assert kaplan_meier_quantile(ended + cut, 0.5) == 9.0
    # the p90 is past what the trial saw end: not reached, never guessed
    assert kaplan_meier_quantile(ended[:5] + cut, 0.9) is None
    with pytest.raises(ValueError):
        kaplan_meier_quantile(ended, 0.0)


def test_the_session_block_travels_through_the_contract() -> None:
    result = judge(sessions_of([(4, SLOW), (4, FAST)]), tiers())
    metrics = contract.TrialMetrics.of(result.summary)
    assert metrics.sessions is not None
    assert metrics.sessions.tiers["sessions"].met == 1
    spec_tier = contract.Tier.model_validate(tiers()[1].to_dict())
    assert spec_tier.engine() == tiers()[1]


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"criterion": "agents"}, "criterion must be one of requests, sessions"),
        ({"criterion": "sessions", "min_session_share": 0}, "min_session_share must be in"),
        ({"criterion": "sessions", "min_session_share": 1.5}, "min_session_share must be in"),
    ],
)
def test_a_bad_criterion_is_refused_by_name(item: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_tiers([{"name": "x", "min_p25_output_speed": 1, "max_ttft_s": 1, **item}])
    with pytest.raises(ValueError):
        contract.Tier.model_validate(
            {"name": "x", "min_p25_output_speed": 1, "max_ttft_s": 1, **item}
        )


def test_the_search_finds_max_agents_under_each_rule() -> None:
    # At N agents, every 8th agent has an all-slow session: at most 12.5% of requests are
    # slow, so the request p25 passes at every N; 95% of sessions meet the tier only while
    # no agent is slow (N <= 7).
    tier_list = tiers(share=0.95)

    async def execute(n: int, phase: str, index: int) -> TrialOutcome:
        spec = [(4, SLOW if i % 8 == 7 else FAST) for i in range(n)]
        result = judge(sessions_of(spec), tier_list, resamples=0)
        return TrialOutcome({k: v.passed for k, v in result.verdicts.items()})

    result = asyncio.run(run_search(execute, [t.name for t in tier_list], cap=64))
    assert result.tiers["requests"].max_agents == 64
    assert result.tiers["sessions"].max_agents == 7


def test_the_engine_cli_searches_under_the_sessions_criterion(tmp_path) -> None:
    """`python -m agentperf.engine search --tiers` with `criterion: sessions` (virtual time on
    the simulator): each trial reports its sessions, and the verdict is the share rule."""
    from tests.engine.test_cli import engine

    trajectories = [
        Trajectory(
            id=f"t{i}",
            turns=tuple(
                Turn(k, ({"role": "user", "content": f"task {i} turn {k}"},), 16, 0.5)
                for k in range(3)
            ),
        )
        for i in range(4)
    ]
    dataset = tmp_path / "ds.jsonl.gz"
    save_dataset(dataset, Dataset(name="s", version="1", trajectories=tuple(trajectories)))
    tiers_path = tmp_path / "tiers.json"
    base = {"min_p25_output_speed": 5, "max_ttft_s": 30}
    tiers_path.write_text(
        json.dumps(
            [
                {"name": "req", **base},
                {"name": "ses", **base, "criterion": "sessions", "min_session_share": 0.9},
            ]
        )
    )
    out = tmp_path / "out"
    args = ["search", "--target", "sim:tiny", "--model", "tiny-1b", "--dataset", str(dataset)]
    args += ["--tiers", str(tiers_path), "--accelerators", "1", "--out", str(out)]
    args += ["--cap", "2", "--warmup", "5", "--duration", "60", "--min-requests", "5"]
    proc = engine(*args)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "search.json").read_text())
    assert [t["criterion"] for t in doc["tier_definitions"]] == ["requests", "sessions"]
    trial = json.loads((Path(doc["trials"][0]["data"]["dir"]) / "trial.json").read_text())
    sessions = trial["summary"]["sessions"]
    share = sessions["tiers"]["ses"]
    assert share["sessions"] == sessions["sessions"] >= 1
    assert trial["verdicts"]["ses"]["passed"] == (share["share"] >= 0.9)
    assert sessions["whole_task_model_time_s"]["sessions"] >= 1  # 3-turn tasks in 60 s
