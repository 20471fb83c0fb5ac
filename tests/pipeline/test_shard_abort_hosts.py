"""An abandoned attempt stops on real load-generator hosts (docs/security.md "An abandoned
attempt stops"): two Celery worker processes consume `loadgen.simulated` (no database, no
S3 credentials) and run a sharded trial's shards against the real-time simulator, with
this test as the coordinator (`CeleryShards`, the pool worker's executor, through the live
runner API). One host's shard is SIGKILLed mid-trial: the other host's shard stops on the
coordinator's STOP, and the simulator's ground truth shows no request of the abandoned
attempt after the retry's start."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from agentperf import contract
from agentperf.engine.jobs import Target, search_job
from agentperf.engine.search import PHASE_RAMP, SearchTrial
from agentperf.engine.sharding import RECORDS_FILE, Sharding, ShardSpec
from agentperf.engine.trial import Tier, TrialResult
from core.queues import loadgen_queue
from runner.twin_server.server import ServerProcess, start_server
from runner.worker.api_client import RunnerApi
from runner.worker.datasets import fetch_dataset
from runner.worker.loadgen_hosts import CeleryShards
from runs.dispatch import dataset_section, pool_token_key, run_token_mint, runner_api_url
from runs.models import BenchmarkRun
from tests.engine.test_shards import _config
from tests.pipeline.builders import prepared_run, runner_info
from tests.pipeline.conftest import no_database_env
from tests.support.workers import WorkerProcess, start_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STOPPED = re.compile(
    r"ShardStopped: the coordinator abandoned this trial attempt \(STOP\); stopped at (\d+) ns"
)


@pytest.fixture
def sim() -> Iterator[ServerProcess]:
    server = start_server("tiny", ground_truth=True)
    yield server
    server.stop()


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


class KillingCeleryShards(CeleryShards):
    """The pool worker's executor; in the first attempt, the pool process of the host that
    is sending shard 1's requests is SIGKILLed (its host lives on, as after a crash)."""

    attempts = 0
    hosts: list[tuple[WorkerProcess, Path]] = []  # (worker, its TMPDIR)
    killed: WorkerProcess | None = None

    async def launch(self, specs: Sequence[ShardSpec]) -> None:
        type(self).attempts += 1
        # the first two-shard attempt (a one-agent trial runs one shard)
        self.kill = len(specs) == 2 and type(self).killed is None
        await super().launch(specs)

    sim: ServerProcess

    def check(self) -> None:
        if self.kill:
            # mid-trial: both shards' agents have a request in the simulator's batch
            running = re.search(r"^vllm:num_requests_running\S* (\S+)$", self.sim.metrics(), re.M)
            in_flight = float(running.group(1)) if running else 0.0
            for worker, tmp in self.hosts:
                shard_1_here = list(tmp.glob(f"agentperf-shard-*-1-*/{RECORDS_FILE}"))
                if shard_1_here and in_flight >= 2:
                    for child in _children(worker.pid):
                        os.kill(child, signal.SIGKILL)
                    type(self).killed = worker
                    self.kill = False
        super().check()


def test_a_killed_shard_host_leaves_no_load_of_its_attempt_during_the_retry(
    pipeline_settings, live_server, cast, tmp_path, sim, monkeypatch
):
    run, _ = prepared_run(cast.org_a)
    seed, token_hash = run_token_mint(run)
    BenchmarkRun.objects.filter(pk=run.pk).update(token_hash=token_hash)
    run.refresh_from_db()
    monkeypatch.setenv(contract.TOKEN_KEY_ENV, pool_token_key("simulated"))
    api = RunnerApi.for_run({"base_url": runner_api_url(run), "seed": seed}, run.pk)
    started = api.report(
        "start", contract.StartReport(runner_info=contract.RunnerInfo.model_validate(runner_info()))
    )
    api.attempt = int(started["attempt"])
    dataset = dataset_section(run)

    hosts = []
    for name in ("lg-a", "lg-b"):
        env = no_database_env()
        env["AGENTPERF_LOADGEN_HOST"] = name
        env["AGENTPERF_RUNNER_CACHE"] = str(tmp_path / name / "cache")
        tmp = (tmp_path / name / "tmp").resolve()
        tmp.mkdir(parents=True)
        env["TMPDIR"] = str(tmp)
        worker = start_worker([loadgen_queue("simulated")], tmp_path / f"{name}.log", env=env)
        hosts.append((worker, tmp))
    KillingCeleryShards.attempts = 0
    KillingCeleryShards.hosts = hosts
    KillingCeleryShards.killed = None
    KillingCeleryShards.sim = sim
    results: list[TrialResult] = []
    failures: list[tuple[int, int, str]] = []
    try:
        search_job(
            target=Target(base_url=sim.url + "/v1"),
            trajectories=fetch_dataset(api, dataset).trajectories,
            tiers=[Tier("t", min_p25_output_speed=1, max_ttft_s=60)],
            # a window longer than the coordinator takes to find a shard silent (10 s): the
            # survivor is still sending when the attempt is abandoned
            base=_config(2, warmup=1.0, duration=20.0, model="tiny-1b"),
            cap=2,
            # resumed after a passed one-agent trial (one shard runs in this process: nothing
            # here looks at it), so the one trial the search runs is the two-shard one
            prior_trials=[SearchTrial(0, 1, PHASE_RAMP, {"t": True})],
            max_trials=2,
            sharding=Sharding(
                executor=lambda: KillingCeleryShards(
                    api=api,
                    run_id=run.pk,
                    queue=loadgen_queue("simulated"),
                    dataset=dataset,
                    work_dir=tmp_path / "coordinator",
                ),
                shards=2,
            ),
            on_trial_result=results.append,
            on_attempt_failed=lambda i, a, why: failures.append((i, a, why)),
        )
    finally:
        for worker, _ in hosts:
            worker.stop()
    logs = {worker.pid: worker.log() for worker, _ in hosts}
    assert KillingCeleryShards.killed is not None, logs
    assert [a for _, a, _ in failures] == [1], (failures, logs)
    survivor = next(w for w, _ in hosts if w is not KillingCeleryShards.killed)
    # the surviving host's shard stopped because the coordinator answered STOP
    stops = STOPPED.findall(logs[survivor.pid])
    killed_log = logs[KillingCeleryShards.killed.pid]
    assert len(stops) == 1, (failures, killed_log[-1500:], logs[survivor.pid][-1500:])
    stopped_ns = int(stops[0])
    # the retry's trial: both shards, its first request sent after the survivor stopped,
    # and the simulator's ground truth has it arrive after that too
    retry = next(r for r in results if r.load_generator and r.load_generator["shards"] == 2)
    first = min(retry.records, key=lambda r: r.t_send_ns)
    assert stopped_ns < first.t_send_ns
    arrivals = [sim.ground_truth(client_id=r.request_id) for r in retry.records]
    assert all(t is not None for t in arrivals)
    assert stopped_ns < min(t.t_received_ns for t in arrivals if t is not None)
