"""An open-loop trial sharded over real shard processes (docs/engine.md "Arrival modes",
"Sharded trials"): the sessions are partitioned by agent id, so K shards start the sessions
one process starts, each at its Poisson arrival time."""

from __future__ import annotations

from collections import defaultdict

from agentperf.engine.jobs import Target, trial_job
from agentperf.engine.openloop import open_trial_config
from agentperf.engine.replay import ARRIVAL_OPEN, arrival_offsets_ns
from agentperf.engine.trajectory import load_dataset
from agentperf.engine.trial import TrialResult
from tests.engine.test_shards import TIERS, _config, _sharding, stub_url

__all__ = ["stub_url"]  # fixtures

RATE = 120.0  # sessions per minute: about 16 sessions over the 8 s trial


def _sessions(result: TrialResult) -> dict[int, list[str]]:
    out: dict[int, list[str]] = defaultdict(list)
    for r in sorted(result.records, key=lambda r: (r.agent_id, r.t_send_ns)):
        out[r.agent_id].append(r.request_id)
    return out


def test_k_shards_start_the_sessions_one_process_starts(stub_url, dataset_path, tmp_path):
    trajectories = load_dataset(dataset_path).trajectories
    target = Target(base_url=stub_url)
    config = open_trial_config(_config(1), 1, RATE)
    assert config.replay.arrival == ARRIVAL_OPEN and config.concurrency >= 6
    one = trial_job(target=target, trajectories=trajectories, config=config, tiers=TIERS)
    three = trial_job(
        target=target,
        trajectories=trajectories,
        config=config,
        tiers=TIERS,
        sharding=_sharding(dataset_path, tmp_path / "work", 3),
    )
    n = config.concurrency
    per_shard = three.load_generator["per_shard"]
    assert [p["agents"] for p in per_shard] == [len(range(k, n, 3)) for k in range(3)]
    assert three.arrival["mode"] == ARRIVAL_OPEN and three.arrival["sessions_scheduled"] == n
    a, b = _sessions(one), _sessions(three)
    # the same sessions arrived (the last may fall after the window's end in either run)
    offsets = arrival_offsets_ns(config.replay.seed, RATE, n)
    horizon = (config.warmup_s + config.duration_s) * 1e9
    arrived = {i for i in range(n) if offsets[i] < horizon - 0.5e9}
    assert arrived <= set(a) and arrived <= set(b)
    for agent in arrived:
        # one session each, its requests in the same order; the window's end cut them
        # where the real-time speed put it
        assert {rid.split("t")[0] for rid in a[agent]} == {f"a{agent}s0"}
        common = min(len(a[agent]), len(b[agent]))
        assert common >= 1 and a[agent][:common] == b[agent][:common], agent
    # each session's first request left at its arrival time or after it, never before, in
    # both runs (how late, on a loaded machine, is a figure, not a wall-clock bound here)
    for result in (one, three):
        start = result.summary.window_start_ns - int(config.warmup_s * 1e9)
        first: dict[int, int] = {}
        for r in result.records:
            first[r.agent_id] = min(first.get(r.agent_id, r.t_send_ns), r.t_send_ns)
        for agent, t in first.items():
            # never early: a sleep that uvloop ends early is slept again (RealClock.sleep),
            # and the shards on this kernel take the coordinator's start as given, so no
            # measured offset's error is in the arrival times
            assert t - start >= offsets[agent], (result is one, agent)
