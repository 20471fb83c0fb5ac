"""Celery tasks. A task takes ids, loads, calls one service (STYLE.md)."""

from __future__ import annotations

import socket

from celery import shared_task


@shared_task(name="runner.health_ping", acks_late=True, ignore_result=False)
def health_ping(nonce: str) -> dict:
    """The worker half of `/health`'s broker round trip."""
    return {"nonce": nonce, "hostname": socket.gethostname()}


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
