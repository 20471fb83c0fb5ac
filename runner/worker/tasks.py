"""The Celery tasks a pool host runs, with no database access (docs/architecture.md "Flow").

`runner.execute_run` runs on a pool queue (`pool.<pool>`): the run spec in its message is all
it gets, and it reports through the runner API. `runner.loadgen_shard` runs on a pool's
load-generator hosts (`loadgen.<pool>`, docs/engine.md "Sharded trials").
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import worker_ready


@shared_task(
    name="runner.execute_run",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    # A run is retried by redelivery (worker lost) or by the reaper, never by Celery's own
    # retry: the runner API decides whether the attempt may go on.
    max_retries=0,
)
def execute_run(spec: dict[str, Any]) -> dict[str, Any]:
    """Execute one benchmark run on this pool host (no database access)."""
    from runner.worker.execute import execute_run as run

    return run(spec)


@shared_task(name="runner.loadgen_shard", acks_late=False, ignore_result=True, max_retries=0)
def loadgen_shard(message: dict[str, Any]) -> dict[str, Any]:
    """One load-generator shard of a sharded trial, on a load-generator host (no database).
    Not redelivered: a shard that missed its trial's start is of no use; the coordinator
    runs the trial again."""
    from runner.worker.loadgen_hosts import run_shard_task

    return run_shard_task(message)


@worker_ready.connect
def reap_orphan_containers(**_: Any) -> None:
    """A worker killed with SIGKILL leaves its run's container running under conmon (until
    its `--timeout`): remove those of this host whose worker is gone as this worker starts,
    not only before the next container launch (runner/launchers/container.py)."""
    from runner.launchers.container import reap_at_startup

    reap_at_startup()
