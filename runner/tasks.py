"""Celery tasks. A task takes ids (or the run spec), loads, calls one service (STYLE.md).

`runner.execute_run` runs on a pool queue (`pool.<pool>`) and has no database access: the
run spec in its message is all it gets, and it reports through the runner API.
`runner.reap_stale_runs` runs on the web side (beat schedule or the management command).
"""

from __future__ import annotations

from celery import shared_task


@shared_task(name="runner.audit_probe", acks_late=True)
def audit_probe(label: str) -> int:
    """Write one AuditEvent from the worker: proves broker → worker → database end to end."""
    from submissions.models import AuditEvent

    event = AuditEvent.objects.create(
        actor_label="worker",
        object_type="probe",
        object_id=label,
        action="probe",
    )
    return event.pk


@shared_task(
    name="runner.execute_run",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    # A run is retried by redelivery (worker lost) or by the reaper, never by Celery's own
    # retry: the runner API decides whether the attempt may go on.
    max_retries=0,
)
def execute_run(spec: dict) -> dict:
    """Execute one benchmark run on this pool host (no database access)."""
    from runner.worker.execute import execute_run as run

    return run(spec)


@shared_task(name="runner.loadgen_shard", acks_late=False, ignore_result=True, max_retries=0)
def loadgen_shard(message: dict) -> dict:
    """One load-generator shard of a sharded trial, on a load-generator host (no database).
    Not redelivered: a shard that missed its trial's start is of no use; the coordinator
    runs the trial again."""
    from runner.worker.shards import run_shard_task

    return run_shard_task(message)


@shared_task(name="runner.reap_stale_runs", acks_late=True, ignore_result=True)
def reap_stale_runs() -> list:
    """Retry or fail runs whose heartbeat went stale (web side: needs the database)."""
    from runner.services import reap_stale_runs as reap

    return reap()
