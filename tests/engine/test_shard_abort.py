"""An abandoned sharded attempt stops sending (docs/security.md "An abandoned attempt stops",
docs/engine.md "Sharded trials"): shard processes the coordinator cannot signal — as on a
remote load-generator host — stop at their next keep-alive, which the coordinator answers
STOP, so no request of the abandoned attempt is sent once the retry runs."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

from agentperf.engine.jobs import Target, search_job
from agentperf.engine.search import PHASE_RAMP, SearchTrial
from agentperf.engine.sharding import (
    RECORDS_FILE,
    START_LEAD_S,
    LocalShards,
    Sharding,
    ShardOutput,
    ShardSpec,
)
from agentperf.engine.trajectory import load_dataset
from agentperf.engine.trial import Tier
from tests.engine.test_shards import _config, stub_url  # noqa: F401 (fixtures)

WARMUP_S, DURATION_S = 1.0, 4.0
# shard 1 of the first attempt dies halfway through the window: both shards are sending
# then, whatever the load (the common start is START_LEAD_S after `collect` is called)
KILL_AT_S = START_LEAD_S + WARMUP_S + DURATION_S / 2


class DetachedShards(LocalShards):
    """Local shard processes that abort() does not kill (a remote host's shards: only the
    keep-alive channel reaches them); shard 1 of the first attempt is SIGKILLed mid-window."""

    attempts = 0
    abandoned: list[tuple[int, Path]] = []  # (pid, folder) of the first attempt's shards
    retry_records: list[Path] = []

    async def launch(self, specs: Sequence[ShardSpec]) -> None:
        type(self).attempts += 1
        self.attempt = type(self).attempts
        self.kill = self.attempt == 1
        self.collecting_since: float | None = None
        await super().launch(specs)
        if self.attempt == 2:
            type(self).retry_records = [folder / RECORDS_FILE for _, _, folder in self.procs]

    async def collect(self, deadline: float) -> list[ShardOutput]:
        self.collecting_since = time.monotonic()  # the coordinator has just set the start
        return await super().collect(deadline)

    def check(self) -> None:
        # (waiting for shard 1's records instead raced its exit on a loaded host: they reach
        # the file at the end of its replay, moments before it exits)
        since = self.collecting_since
        if self.kill and since is not None and time.monotonic() >= since + KILL_AT_S:
            _spec, proc, _folder = self.procs[1]
            os.kill(proc.pid, signal.SIGKILL)
            self.kill = False
        super().check()

    def abort(self) -> None:
        if self.attempt == 1:
            type(self).abandoned = [(proc.pid, folder) for _, proc, folder in self.procs]
            self.procs = []  # forgotten, not killed: the keep-alive must stop them
            return
        super().abort()


def _sends(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [json.loads(line)["t_send_ns"] for line in path.read_bytes().splitlines() if line]


def test_the_survivor_of_an_abandoned_attempt_stops_before_the_retry_sends(
    stub_url,  # noqa: F811
    generated_dataset_path,
    tmp_path,
):
    # The answers as generated (up to 8192 tokens): the survivor is still sending, or
    # draining a long answer, when the coordinator abandons the attempt.
    dataset_path = generated_dataset_path
    DetachedShards.attempts = 0
    failures: list[tuple[int, int, str]] = []
    search_job(
        target=Target(base_url=stub_url),
        trajectories=load_dataset(dataset_path).trajectories,
        tiers=[Tier("t", min_p25_output_speed=1, max_ttft_s=60)],
        # a long window: without the stop, the survivor would still be sending during the
        # retry's whole trial
        base=_config(2, warmup=WARMUP_S, duration=DURATION_S, model="stub"),
        cap=2,
        # resumed after a passed one-agent trial (one shard runs in this process: nothing
        # here looks at it), so the one trial the search runs is the two-shard one
        prior_trials=[SearchTrial(0, 1, PHASE_RAMP, {"t": True})],
        max_trials=2,
        sharding=Sharding(
            executor=lambda: DetachedShards(dataset_path=dataset_path, work_dir=tmp_path / "w"),
            shards=2,
        ),
        on_attempt_failed=lambda i, a, why: failures.append((i, a, why)),
    )
    assert [a for _, a, _ in failures] == [1], failures
    assert DetachedShards.attempts >= 2
    survivor_pid, survivor = DetachedShards.abandoned[0]
    # the survivor stopped because the coordinator told it to (its own stderr says so) ...
    stderr = (survivor / "stderr.log").read_text()
    assert "ShardStopped: the coordinator abandoned this trial attempt (STOP)" in stderr, stderr[
        -2000:
    ]
    # ... and every request it sent was sent before the retry's first request
    abandoned_sends = _sends(survivor / RECORDS_FILE)
    retry_sends = [t for path in DetachedShards.retry_records for t in _sends(path)]
    assert abandoned_sends and retry_sends
    assert max(abandoned_sends) < min(retry_sends)
