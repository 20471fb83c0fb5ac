"""Web-side Celery tasks (they need the database). A task takes ids, loads, calls one service
(docs/pipeline.md "Web-side tasks").

The pool host's tasks (`runner.execute_run`, `runner.loadgen_shard`) live in
`runner/worker/tasks.py`: they have no database (docs/architecture.md "Flow").
"""

from __future__ import annotations

from celery import shared_task


@shared_task(name="runs.audit_probe", acks_late=True)
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


@shared_task(name="runs.reap_stale_runs", acks_late=True, ignore_result=True)
def reap_stale_runs() -> list:
    """Retry or fail runs whose heartbeat went stale (web side: needs the database)."""
    from runs.services import reap_stale_runs as reap

    return reap()
