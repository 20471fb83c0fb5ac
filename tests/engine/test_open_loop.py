"""Open-loop arrivals (issue #28 item 2; docs/engine.md "Arrival modes"): seeded Poisson
arrivals, one session per arrival, partitioned by agent id the same for any K shards, the
concurrency a trial produced, and the rate search on virtual time."""

from __future__ import annotations

import math

import pytest

from agentperf.engine.metrics import RequestRecord
from agentperf.engine.openloop import (
    auto_rate_step,
    open_loop_summary,
    open_trial_config,
    rate_of,
    steps_for,
)
from agentperf.engine.replay import (
    ARRIVAL_OPEN,
    Replay,
    ReplayConfig,
    arrival_offsets_ns,
    open_sessions,
)
from agentperf.engine.search import SearchTrial, TrialOutcome, run_search
from agentperf.engine.sharding import agents_of
from agentperf.engine.trial import TrialConfig, session_concurrency
from tests.engine.test_replay import DATA
from tests.engine.virtual_time import PacedTransport, VirtualClock, run_virtual


def test_arrivals_are_seeded_increasing_and_scale_with_the_rate() -> None:
    a = arrival_offsets_ns(3, 6.0, 200)
    assert a == arrival_offsets_ns(3, 6.0, 200)
    assert a != arrival_offsets_ns(4, 6.0, 200)
    assert all(x < y for x, y in zip(a, a[1:], strict=False))
    # the same sequence compressed: twice the rate, half the time (to the nanosecond)
    b = arrival_offsets_ns(3, 12.0, 200)
    assert all(abs(2 * y - x) <= 2 for x, y in zip(a, b, strict=True))
    # a prefix does not depend on how many are drawn
    assert arrival_offsets_ns(3, 6.0, 50) == a[:50]


def test_the_session_count_is_the_arrivals_before_the_horizon_and_poisson() -> None:
    offsets = arrival_offsets_ns(0, 30.0, 5000)
    count = open_sessions(0, 30.0, 3600.0)
    assert count == sum(1 for t in offsets if t < 3600 * 1e9)
    # 30 per minute for an hour: 1800 expected, sd ~42
    assert abs(count - 1800) < 5 * math.sqrt(1800)
    with pytest.raises(ValueError, match="> 0"):
        open_sessions(0, 0.0, 60.0)


def _open_replay(
    rate: float, sessions: int, agent_ids: list[int] | None, stop_s: float
) -> list[RequestRecord]:
    async def main(clock: VirtualClock) -> list[RequestRecord]:
        transport = PacedTransport(clock)
        cfg = ReplayConfig(model="m", seed=5, arrival=ARRIVAL_OPEN, rate_per_min=rate)
        start = clock.now_ns()
        r = Replay(transport, clock, DATA, cfg, sessions, agent_ids=agent_ids)
        records = await r.run(stop_sending_at_ns=start + int(stop_s * 1e9), start_ns=start)
        return [_shift(x, start) for x in records]

    return run_virtual(main)


def _shift(record: RequestRecord, start: int) -> RequestRecord:
    record.t_send_ns -= start
    if record.t_end_ns is not None:
        record.t_end_ns -= start
    return record


def test_each_session_arrives_on_time_runs_its_trajectory_once_and_leaves() -> None:
    rate, horizon = 12.0, 60.0
    n = open_sessions(5, rate, horizon)
    records = _open_replay(rate, n, None, horizon + 600)  # nothing is cut at the stop
    offsets = arrival_offsets_ns(5, rate, n)
    by_agent: dict[int, list[RequestRecord]] = {}
    for r in records:
        by_agent.setdefault(r.agent_id, []).append(r)
    assert sorted(by_agent) == list(range(n))
    for agent, rs in by_agent.items():
        rs.sort(key=lambda r: r.t_send_ns)
        assert rs[0].t_send_ns == offsets[agent]  # arrives at its Poisson time
        assert {r.session_id for r in rs} == {f"a{agent}s0"}  # one session, then it leaves
        assert [r.turn_index for r in rs] == list(range(len(rs)))  # from the first turn
        assert len(rs) == 4  # the whole trajectory (DATA: 4 turns each)


def test_sessions_partitioned_by_agent_id_are_the_same_for_any_k() -> None:
    rate, stop = 20.0, 90.0
    n = open_sessions(5, rate, stop)

    def key(r: RequestRecord) -> tuple[str, int, int, str, int]:
        return (r.request_id, r.agent_id, r.t_send_ns, r.trajectory_id, r.turn_index)

    whole = sorted(key(r) for r in _open_replay(rate, n, None, stop))
    assert whole
    for shards in (2, 3, 7):
        union: list[tuple[str, int, int, str, int]] = []
        for shard in range(shards):
            ids = list(agents_of(n, shards, shard))
            union.extend(key(r) for r in _open_replay(rate, n, ids, stop))
        assert sorted(union) == whole


def _record(session: str, send_s: float, end_s: float) -> RequestRecord:
    ns = 1_000_000_000
    return RequestRecord(
        request_id=f"{session}-{send_s}",
        agent_id=0,
        session_id=session,
        trajectory_id="t",
        turn_index=0,
        target_output_tokens=1,
        t_send_ns=int(send_s * ns),
        t_first_ns=int(send_s * ns),
        t_last_ns=int(end_s * ns),
        t_end_ns=int(end_s * ns),
        n_reads=1,
        n_output_events=1,
        n_in=1,
        n_out=1,
        n_cached=0,
        local_prompt_tokens=1,
        ok=True,
    )


def test_concurrent_sessions_are_time_averaged_over_the_window_with_their_peak() -> None:
    ns = 1_000_000_000
    records = [
        _record("a", 0, 4),  # 0-10 s (two turns)
        _record("a", 6, 10),
        _record("b", 5, 15),  # 5-15 s
        _record("c", 12, 30),  # 12-30 s, cut at the window's end (20 s)
        _record("d", 25, 26),  # after the window
    ]
    block = session_concurrency(records, window_start_ns=0, window_end_ns=20 * ns)
    # a: 10 s, b: 10 s, c: 8 s in a 20 s window -> 28/20
    assert block["mean"] == pytest.approx(28 / 20)
    assert block["peak"] == 2 and block["sessions"] == 3


def test_a_trial_at_a_rate_schedules_every_session_of_its_warmup_and_window() -> None:
    base = TrialConfig(
        concurrency=1, warmup_s=30, duration_s=90, accelerators=1, replay=ReplayConfig(model="m")
    )
    config = open_trial_config(base, 8, 0.5)
    assert config.replay.arrival == ARRIVAL_OPEN and config.replay.rate_per_min == 4.0
    assert config.concurrency == max(1, open_sessions(0, 4.0, 120.0))
    assert steps_for(10.0, 0.5) == 20 and steps_for(10.1, 0.5) == 21
    assert rate_of(3, 0.25) == 0.75


def test_the_open_loop_summary_reports_the_rate_and_the_sessions_at_it() -> None:
    def at(rate_steps: int) -> dict[str, object]:
        return {
            "summary": {"ttft_s": {"p50": 0.1 * rate_steps, "p75": 0.2 * rate_steps}},
            "arrival": {"concurrent_sessions": {"mean": 2.0 * rate_steps, "peak": 3 * rate_steps}},
        }

    async def oracle(n: int, phase: str, index: int) -> TrialOutcome:
        return TrialOutcome({"t": n <= 6}, at(n))

    async def main(clock: VirtualClock) -> object:
        return await run_search(oracle, ["t"], cap=steps_for(16.0, 1.0))

    result = run_virtual(main)
    doc = open_loop_summary(result, 1.0)  # type: ignore[arg-type]
    tier = doc["tiers"]["t"]
    assert tier["max_rate_per_min"] == 6.0 and tier["lowest_fail_rate_per_min"] == 7.0
    assert tier["mean_concurrent_sessions"] == 12.0 and tier["peak_concurrent_sessions"] == 18
    assert tier["ttft_s"] == {"p50": pytest.approx(0.6), "p75": pytest.approx(1.2)}
    assert tier["confirmed"] and doc["rate_cap_per_min"] == 16.0
    assert isinstance(result.trials[0], SearchTrial)  # type: ignore[attr-defined]


def test_the_default_step_gives_the_first_rate_enough_requests() -> None:
    # DATA: 4 turns a session; a 60 s window and 20 requests -> 10 sessions/min, a 1-2-5 step
    assert auto_rate_step(DATA, 60.0, 20) == 10.0
    assert auto_rate_step(DATA, 120.0, 20) == 5.0
    assert auto_rate_step(DATA, 600.0, 20) == 1.0
    assert auto_rate_step(DATA, 60.0, 23) == 20.0


def test_a_deployment_configs_arrival_is_checked_and_named_on_a_mistake() -> None:
    from submissions.schema import ConfigError, parse_config
    from tests.pipeline.conftest import EXAMPLES

    text = (EXAMPLES / "simulated.yaml").read_text()
    config = parse_config(text.replace("max_concurrency: 256", "arrival: open"), "text/yaml")
    assert config.benchmark.arrival == "open"
    assert parse_config(text, "text/yaml").benchmark.arrival is None  # the closed loop only
    with pytest.raises(ConfigError) as caught:
        parse_config(text.replace("max_concurrency: 256", "arrival: sometimes"), "text/yaml")
    assert "benchmark.arrival" in caught.value.fields
