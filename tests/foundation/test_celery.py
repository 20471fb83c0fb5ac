import pytest
from django.conf import settings

from config.celery import app
from core.queues import pool_queue, web_queue
from runs.tasks import audit_probe
from submissions.models import AuditEvent


def test_celery_is_configured_for_long_runs():
    conf = app.conf
    assert conf.task_serializer == "json" and conf.accept_content == ["json"]
    assert conf.task_acks_late is True
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_soft_time_limit < conf.task_time_limit
    assert conf.broker_transport_options["visibility_timeout"] > conf.task_time_limit
    assert conf.task_reject_on_worker_lost is True
    assert pool_queue("gb300-nvl72") == f"{settings.CELERY_QUEUE_PREFIX}pool.gb300-nvl72"


@pytest.mark.django_db(transaction=True)
def test_a_task_sent_through_the_broker_is_consumed_by_a_separate_worker_process(celery_worker):
    assert settings.BROKER_PROFILE == "amqp", "make test runs against RabbitMQ"
    result = audit_probe.apply_async(args=["through-rabbitmq"], queue=web_queue())
    event_id = result.get(timeout=60)
    event = AuditEvent.objects.get(pk=event_id)
    assert (event.object_id, event.actor_label) == ("through-rabbitmq", "worker")
    assert str(celery_worker.pid) not in ("", "0")
