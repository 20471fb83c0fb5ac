"""Sharded trials (docs/engine.md "Sharded trials"): real shard processes against real
servers — the simulator's real-time server (with its ground truth) and the loopback stub."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from agentperf.engine.cachetruth import summarize_cache_truth
from agentperf.engine.jobs import Target, search_job, trial_job
from agentperf.engine.metrics import (
    RequestRecord,
    percentile,
    summarize,
    summarize_sessions,
    whole_task_model_times,
)
from agentperf.engine.replay import ReplayConfig
from agentperf.engine.search import SearchTrial
from agentperf.engine.sharding import (
    LocalShards,
    Sharding,
    ShardOutput,
    ShardSpec,
    auto_shards,
    merge_outputs,
)
from agentperf.engine.stub import StubConfig, serve
from agentperf.engine.trajectory import Dataset, load_dataset, save_dataset
from agentperf.engine.trial import Tier, TrialConfig, TrialResult
from runner.twin_server.server import ServerProcess, start_server

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerProcess]:
    server = start_server("tiny", ground_truth=True)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    """The loopback stub: 300 tok/s streams after a 20-60 ms first token."""
    ctx = mp.get_context("spawn")
    ports = ctx.Queue()
    proc = ctx.Process(
        target=serve,
        args=(ports, None, StubConfig(interval_s=1 / 300, ttft_s=(0.02, 0.06))),
        daemon=True,
    )
    proc.start()
    port = ports.get(timeout=60)
    yield f"http://127.0.0.1:{port}/v1"
    proc.terminate()
    proc.join(timeout=10)


TIERS = [Tier("t", min_p25_output_speed=20, max_ttft_s=5)]
# The window of the tests that compare records and summaries computed two ways (not figures,
# nor intervals that need many requests): the dataset's answers take under a second here.
WINDOW_S = 3.0


def _config(
    n: int, *, warmup: float = 2.0, duration: float = 6.0, model: str = "tiny-1b", salt: str = ""
) -> TrialConfig:
    """``salt`` changes the sessions' cache namespaces and nothing else (so a second run of
    the same agents finds nothing the first one cached)."""
    return TrialConfig(
        concurrency=n,
        warmup_s=warmup,
        duration_s=duration,
        accelerators=1,
        min_requests=1,
        # this 2-core machine is shared with other test processes: the health gate has its
        # own tests (test_metrics, the merge test below), here it must not decide
        max_loop_lag_ms=1000.0,
        max_cpu_percent=100.0,
        replay=ReplayConfig(model=model, ramp_s=1.0, seed=3, namespace_salt=salt),
    )


def _sharding(dataset: Path, work: Path, k: int, **kw) -> Sharding:
    return Sharding(
        executor=lambda: LocalShards(dataset_path=dataset, work_dir=work), shards=k, **kw
    )


def _per_agent(result: TrialResult) -> dict[int, list[str]]:
    out: dict[int, list[str]] = defaultdict(list)
    for r in sorted(result.records, key=lambda r: (r.agent_id, r.t_send_ns)):
        out[r.agent_id].append(r.request_id)
    return out


def _ttft_errors_ms(server: ServerProcess, records: Sequence[RequestRecord]) -> list[float]:
    errors = []
    for r in records:
        truth = server.ground_truth(client_id=r.request_id)
        if r.ok and r.t_first_ns is not None and truth is not None and truth.t_first_ns:
            errors.append((r.t_first_ns - truth.t_first_ns) / 1e6)
    return sorted(errors)


def test_two_shards_send_the_requests_one_process_sends(sim, dataset_path, tmp_path):
    trajectories = load_dataset(dataset_path).trajectories
    target = Target(base_url=sim.url + "/v1")
    one = trial_job(
        target=target, trajectories=trajectories, config=_config(6, salt="k1"), tiers=TIERS
    )
    ea = _ttft_errors_ms(sim, one.records)  # now: the same request ids come again below
    two = trial_job(
        target=target,
        trajectories=trajectories,
        config=_config(6, salt="k2"),
        tiers=TIERS,
        sharding=_sharding(dataset_path, tmp_path / "work", 2),
        out_dir=tmp_path / "k2",
    )
    assert two.load_generator["shards"] == 2
    assert [p["agents"] for p in two.load_generator["per_shard"]] == [3, 3]
    assert two.load_generator["healthy"], two.load_generator["reasons"]
    # Each agent sends the same requests in the same order; where the window's end cut its
    # sequence depends on the server's real-time speed, so one run's list is a prefix of
    # the other's.
    a, b = _per_agent(one), _per_agent(two)
    assert set(a) == set(b) == set(range(6))
    for agent in a:
        common = min(len(a[agent]), len(b[agent]))
        assert common >= 1
        assert a[agent][:common] == b[agent][:common], agent
    # Both runs' statistics are real-time figures of a server on a shared machine, so they
    # are not compared here (that would be a wall-clock bound); that the merged records give
    # the one-process summary is the next test, and the agreement of K = 1 and K = 2 is a
    # benchmark figure (benchmarks/shard_scaling.py).
    for key in ("p25_output_speed", "ttft_p75"):
        ib = two.statistics["intervals"][key]
        assert ib["low"] <= ib["estimate"] <= ib["high"], (key, ib)
    # First-token stamps are taken after the server wrote the token, in both runs (the
    # stamping error itself is a benchmark figure: benchmarks/shard_scaling.py, docs/benchmarks.md
    # "Sharded trials"; a bound on it here would be a wall-clock bound on a shared machine).
    eb = _ttft_errors_ms(sim, two.records)
    assert ea and eb and ea[0] >= 0.0 and eb[0] >= 0.0
    for r in two.records:
        if r.ok and r.t_first_ns is not None:
            assert r.t_send_ns <= r.t_first_ns, r.request_id
            assert r.t_end_ns is None or r.t_first_ns <= r.t_end_ns, r.request_id


def test_merged_records_are_the_union_and_give_the_one_process_summary(
    stub_url, dataset_path, tmp_path
):
    trajectories = load_dataset(dataset_path).trajectories
    config = _config(8, duration=WINDOW_S, model="stub")
    result = trial_job(
        target=Target(base_url=stub_url),
        trajectories=trajectories,
        config=config,
        tiers=TIERS,
        sharding=_sharding(dataset_path, tmp_path / "work", 2),
    )
    folders = sorted((tmp_path / "work" / "t0a1").glob("shard-*"))
    assert len(folders) == 2
    outputs = [
        ShardOutput(json.loads((f / "report.json").read_text()), f / "records.jsonl")
        for f in folders
    ]
    lines = [
        json.loads(line) for f in folders for line in (f / "records.jsonl").read_text().splitlines()
    ]
    by_shard = [
        {json.loads(x)["agent_id"] % 2 for x in (f / "records.jsonl").read_text().splitlines()}
        for f in folders
    ]
    assert by_shard == [{0}, {1}]  # round robin: shard s runs agents s, s+2, ...
    merged, section, health = merge_outputs(outputs, config)
    assert sorted(r.request_id for r in merged) == sorted(d["request_id"] for d in lines)
    assert sorted(r.request_id for r in result.records) == sorted(d["request_id"] for d in lines)
    assert health.healthy and section["shards"] == 2
    # the summary of the merged records, computed in this process, is the trial's
    s = result.summary
    again = summarize(
        merged,
        window_start_ns=s.window_start_ns,
        window_end_ns=s.window_end_ns,
        accelerators=1,
        client=health,
        extra_ttft_percentiles={75.0},
    )
    # and the session SLOs of the merged records (docs/engine.md "Session SLOs")
    again.sessions = summarize_sessions(
        merged,
        TIERS,
        window_start_ns=s.window_start_ns,
        window_end_ns=s.window_end_ns,
        resamples=config.bootstrap_resamples,
        confidence=config.bootstrap_confidence,
        seed=config.replay.seed,
        trajectory_turns={t.id: len(t.turns) for t in trajectories},
    )
    # and the cache truth of the merged records against the same trajectories
    again.cache_truth = summarize_cache_truth(
        merged, trajectories, window_start_ns=s.window_start_ns, window_end_ns=s.window_end_ns
    )
    assert again.to_dict() == s.to_dict()
    # same host: the shards share the monotonic clock, so no shift was applied
    assert all(p["same_clock"] and p["clock_offset_ns"] == 0 for p in section["per_shard"])
    assert all(p["clock_uncertainty_ns"] < 1_000_000 for p in section["per_shard"])
    # one hot shard, or one unsure clock, makes the whole trial's client unhealthy
    hot = json.loads(json.dumps(outputs[1].report))
    hot["health"]["cpu_percent"] = 97.0
    unsure = json.loads(json.dumps(outputs[0].report))
    unsure["boot_id"] = "another-host"
    unsure["clock"]["end"]["uncertainty_ns"] = 1_500_000
    strict = _config(8, duration=WINDOW_S, model="stub")
    _, section, health = merge_outputs(
        [ShardOutput(unsure, outputs[0].records_path), ShardOutput(hot, outputs[1].records_path)],
        strict,
    )
    assert not health.healthy and not section["healthy"]
    assert "shard 1: client CPU 97% > 100%" not in health.reason  # the limit is this config's
    assert "shard 0: clock offset uncertain by 1.50 ms > 1 ms" in health.reason
    assert section["per_shard"][0]["clock_offset_ns"] == unsure["clock"]["start"]["offset_ns"]
    strict.max_cpu_percent = 90.0
    _, _, health = merge_outputs([ShardOutput(hot, outputs[1].records_path)], strict)
    assert "shard 1: client CPU 97% > 90%" in health.reason
    assert "shards ran 4 agents, the trial has 8" in health.reason


class KillingShards(LocalShards):
    """Local shards whose shard 1 is SIGKILLed in the first attempt, as soon as it runs (a
    kill timed by what the shard had written raced the shard's end on a loaded machine:
    a three-second trial could finish before the coordinator's next check saw it)."""

    attempts = 0

    async def launch(self, specs: Sequence[ShardSpec]) -> None:
        type(self).attempts += 1
        await super().launch(specs)
        if type(self).attempts == 1:
            _, proc, _ = self.procs[1]
            os.kill(proc.pid, signal.SIGKILL)


def test_a_killed_shard_fails_its_attempt_and_the_search_runs_it_again(
    stub_url, dataset_path, tmp_path
):
    KillingShards.attempts = 0
    trajectories = load_dataset(dataset_path).trajectories
    failures: list[tuple[int, int, str]] = []
    stored: list[SearchTrial] = []
    sharding = Sharding(
        executor=lambda: KillingShards(dataset_path=dataset_path, work_dir=tmp_path / "w"),
        shards=2,
    )
    result = search_job(
        target=Target(base_url=stub_url),
        trajectories=trajectories,
        tiers=[Tier("t", min_p25_output_speed=1, max_ttft_s=60)],
        base=_config(1, warmup=1.0, duration=3.0, model="stub"),
        cap=2,
        max_trials=4,
        sharding=sharding,
        on_trial=stored.append,
        on_attempt_failed=lambda i, a, why: failures.append((i, a, why)),
    )
    assert len(failures) == 1
    index, attempt, reason = failures[0]
    assert attempt == 1 and "shard 1 of 2 killed by signal 9" in reason
    # the stored trial list has no gap and no duplicate; the retried trial says so
    assert [t.index for t in stored] == list(range(len(stored))) == [t.index for t in result.trials]
    retried = stored[index]
    assert retried.concurrency == 2
    lg = retried.data["load_generator"]
    assert lg["failed_attempts"] == [{"attempt": 1, "reason": reason}]
    assert lg["shards"] == 2 and lg["healthy"]
    assert KillingShards.attempts >= 2


def test_auto_picks_more_shards_as_the_agents_grow():
    ceiling = 100_000.0
    picks = [auto_shards(n, 82.0, ceiling) for n in (64, 512, 1024, 4096)]
    assert picks == sorted(picks) and picks[0] < picks[-1]
    assert picks[-1] == -(-4096 * 82 // 50_000)  # each shard at most half a core
    s = Sharding(
        executor=lambda: None,
        shards=None,
        fastest_speed=82.0,  # type: ignore[arg-type,return-value]
        ceiling_events_per_core_s=ceiling,
        max_shards=6,
    )
    assert s.shards_for(64) == 1 and s.shards_for(4096) == 6


def test_calibrate_client_measures_a_ceiling_and_auto_uses_it(stub_url, dataset_path, tmp_path):
    out = tmp_path / "cal.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentperf.engine",
            "calibrate-client",
            "--rounds",
            "1",
            "--streams",
            "8",
            "--events",
            "200",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    assert doc["events_per_core_s"] > 1000 and doc["rounds"][0]["events"] == 8 * 200
    # a ceiling so low that 4 agents at 50 tok/s need 2 shards of half a core each
    out.write_text(json.dumps({"events_per_core_s": 300}))
    tiers = tmp_path / "tiers.json"
    tiers.write_text(json.dumps([{"name": "t", "min_p25_output_speed": 50, "max_ttft_s": 9}]))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentperf.engine",
            "trial",
            "--base-url",
            stub_url,
            "--model",
            "stub",
            "--dataset",
            str(dataset_path),
            "--accelerators",
            "1",
            "--concurrency",
            "4",
            "--warmup",
            "1",
            "--duration",
            "2",
            "--tiers",
            str(tiers),
            "--min-requests",
            "1",
            "--shards",
            "auto",
            "--out",
            str(tmp_path / "auto"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "AGENTPERF_CLIENT_CALIBRATION": str(out)},
    )
    assert run.returncode == 0, run.stderr
    trial = json.loads((tmp_path / "auto" / "trial.json").read_text())
    assert trial["load_generator"]["shards"] == 2


def test_shards_refuse_a_virtual_time_target(dataset_path, tmp_path):
    with pytest.raises(ValueError, match="real endpoint"):
        trial_job(
            target=Target(sim_profile="tiny"),
            trajectories=load_dataset(dataset_path).trajectories,
            config=_config(4),
            sharding=_sharding(dataset_path, tmp_path, 2),
        )


def _whole_task_sessions(records: Sequence[RequestRecord], w0: int, w1: int) -> int:
    """Sessions with a request sent in [w0, w1) (every one is whole: one turn each)."""
    return len({(r.agent_id, r.session_id) for r in records if w0 <= r.t_send_ns < w1})


def test_whole_task_time_counts_the_same_sessions_sharded_or_not(stub_url, dataset_path, tmp_path):
    """Whole-task model time (docs/engine.md "Session SLOs") knows each trajectory's turn
    count in a sharded trial as in one process: a session that reached its trajectory's
    last turn counts even when its agent did not go on to another before the window's end.
    One-turn trajectories make every agent's last session such a session."""
    full = load_dataset(dataset_path)
    one_turn = Dataset(
        "one-turn",
        "1",
        tuple(dataclasses.replace(t, turns=t.turns[:1]) for t in full.trajectories),
    )
    path = tmp_path / "one-turn.jsonl.gz"
    save_dataset(path, one_turn)
    turns = {t.id: len(t.turns) for t in one_turn.trajectories}
    assert set(turns.values()) == {1}
    config = _config(4, duration=WINDOW_S, model="stub")
    sharded = trial_job(
        target=Target(base_url=stub_url),
        trajectories=one_turn.trajectories,
        config=config,
        tiers=TIERS,
        sharding=_sharding(path, tmp_path / "work", 2),
    )
    single = trial_job(
        target=Target(base_url=stub_url),
        trajectories=one_turn.trajectories,
        config=config,
        tiers=TIERS,
    )
    assert sharded.load_generator["shards"] == 2 and not single.load_generator
    for result in (sharded, single):
        s = result.summary
        w0, w1 = s.window_start_ns, s.window_end_ns
        whole = s.sessions["whole_task_model_time_s"]
        # every session sent in the window is whole: the agents' last ones included
        assert whole["sessions"] == _whole_task_sessions(result.records, w0, w1)
        blind = whole_task_model_times(result.records, window_start_ns=w0, window_end_ns=w1)
        # without the turn counts, the agents' last sessions would be left out
        assert whole["sessions"] > len(blind)
        assert whole["median"] == percentile(
            whole_task_model_times(
                result.records, window_start_ns=w0, window_end_ns=w1, trajectory_turns=turns
            ),
            50,
        )
