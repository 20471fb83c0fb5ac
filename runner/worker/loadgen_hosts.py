"""Load-generator shards across hosts, through Celery (docs/engine.md "Sharded trials").

A pool that lists load-generator hosts has its pool worker coordinate: each trial's shards
go as ``runner.loadgen_shard`` tasks to the ``loadgen.<pool>`` queue, which the load
generator hosts consume. A shard host fetches the dataset and reports through the runner
API with the run's token (like the pool worker: no database, no S3 credentials), runs its
slice of the agents (``engine.sharding.run_shard``), uploads its raw records through a
presigned URL, and posts its report to ``runs/<id>/shards``. The coordinator polls that
list and reads each shard's records back through the GET URL it gives.

Liveness: every shard says hello to the coordinator's clock server while it runs; one that
falls silent (its host killed) fails the trial at once, and the search runs it again. An
abandoned attempt stops: its tasks are revoked and the coordinator answers its running
shards' keep-alives with STOP, so they stop sending within a keep-alive interval.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentperf.engine import rawrecords
from agentperf.engine.sharding import (
    RECORDS_FILE,
    REPORT_FILE,
    ShardFailed,
    ShardOutput,
    ShardSpec,
    run_shard_here,
)
from runner.worker.api_client import RunnerApi, RunnerApiError
from runner.worker.datasets import fetch_dataset

log = logging.getLogger(__name__)

TASK_NAME = "runner.loadgen_shard"
HOST_ENV = "AGENTPERF_LOADGEN_HOST"  # the name a load-generator host reports (default: hostname)
POLL_S = 0.5


class CeleryShards:
    """Shards as Celery tasks on a load-generator queue; outputs come back through the
    runner API."""

    def __init__(
        self,
        *,
        api: RunnerApi,
        run_id: int,
        queue: str,
        dataset: dict[str, Any],
        api_key: str | None = None,
        work_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.api = api
        self.run_id = run_id
        self.queue = queue
        self.dataset = dataset
        self.api_key = api_key
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="agentperf-shards-"))
        self.specs: list[ShardSpec] = []
        self.task_ids: list[str] = []

    async def launch(self, specs: Sequence[ShardSpec]) -> None:
        from celery import current_app

        self.specs = list(specs)
        for spec in self.specs:
            # The token's seed, never the token (docs/security.md "Run tokens and upload
            # grants"): a load-generator host of the pool derives it with the pool's key.
            message = {
                "run_id": self.run_id,
                "api": self.api.ref,
                "attempt": self.api.attempt,
                "dataset": self.dataset,
                "shard": spec.to_dict(),
                "api_key": self.api_key,
            }
            # A message nobody took within the ready timeout is of no use: it expires.
            result = current_app.send_task(TASK_NAME, args=[message], queue=self.queue, expires=300)
            self.task_ids.append(str(result.id))

    def check(self) -> None:
        """Nothing to poll: a lost shard host shows as silence on the clock server."""

    async def collect(self, deadline: float) -> list[ShardOutput]:
        if not self.specs:
            return []
        trial_id, k = self.specs[0].trial_id, len(self.specs)
        while True:
            listed = await asyncio.to_thread(
                self.api.call, "GET", f"shards?trial_id={trial_id}&shards={k}"
            )
            reports = listed.get("shards") or []
            if len(reports) == k:
                break
            if time.monotonic() > deadline:
                have = sorted(int(r["shard"]) for r in reports)
                missing = sorted(set(range(k)) - set(have))
                raise ShardFailed(f"shards {missing} of {trial_id} sent no report in time")
            await asyncio.sleep(POLL_S)
        outputs = []
        folder = self.work_dir / trial_id
        folder.mkdir(parents=True, exist_ok=True)
        for doc in sorted(reports, key=lambda r: int(r["shard"])):
            blob = await asyncio.to_thread(self.api.download, str(doc["url"]))
            if hashlib.sha256(blob).hexdigest() != doc["sha256"]:
                raise ShardFailed(f"shard {doc['shard']}'s records do not match their digest")
            path = folder / f"shard-{int(doc['shard'])}.jsonl"
            path.write_bytes(rawrecords.decompress(blob))
            outputs.append(ShardOutput(dict(doc["report"]), path))
        return outputs

    def abort(self) -> None:
        """Revoke this attempt's shard tasks (a message not yet taken never runs); a shard
        already running stops at its next keep-alive, which the coordinator answers STOP
        (agentperf.engine.clocksync; docs/security.md "An abandoned attempt stops")."""
        from celery import current_app

        ids, self.task_ids, self.specs = self.task_ids, [], []
        if ids:
            try:
                current_app.control.revoke(ids)
            except Exception as exc:  # the keep-alive still stops a running shard
                log.warning("could not revoke shard tasks %s: %s", ids, exc)


def run_shard_task(message: dict[str, Any]) -> dict[str, Any]:
    """The ``runner.loadgen_shard`` task's body, on a load-generator host."""
    api = RunnerApi.for_run(message["api"], int(message["run_id"]))
    api.attempt = int(message["attempt"])
    spec = ShardSpec.from_dict(message["shard"])
    dataset = fetch_dataset(api, message["dataset"])
    out_dir = Path(tempfile.mkdtemp(prefix=f"agentperf-shard-{spec.trial_id}-{spec.shard}-"))

    async def finish(report: dict[str, Any], records: Path) -> None:
        report["host"] = os.environ.get(HOST_ENV) or socket.gethostname()
        blob = rawrecords.compress(records.read_bytes())
        digest = hashlib.sha256(blob).hexdigest()
        meta = {
            "kind": "shard_records",
            "sha256": digest,
            "size": len(blob),
            "trial_id": spec.trial_id,
            "shard": spec.shard,
        }
        grant = await asyncio.to_thread(api.call, "POST", "uploads", meta)
        await asyncio.to_thread(api.upload, grant["upload"], blob)
        body = {
            "trial_id": spec.trial_id,
            "shard": spec.shard,
            "report": report,
            "sha256": digest,
            "size": len(blob),
        }
        await asyncio.to_thread(api.call, "POST", "shards", body)

    try:
        report = run_shard_here(
            spec, dataset.trajectories, out_dir, api_key=message.get("api_key"), finish=finish
        )
    except RunnerApiError as exc:
        log.warning("shard %s of %s could not report: %s", spec.shard, spec.trial_id, exc)
        raise
    finally:
        for name in (RECORDS_FILE, REPORT_FILE):
            (out_dir / name).unlink(missing_ok=True)
        out_dir.rmdir()
    return {"shard": spec.shard, "trial_id": spec.trial_id, "records": report["records"]}
