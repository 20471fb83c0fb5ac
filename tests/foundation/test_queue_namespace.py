"""Each test session has its own queue namespace (tests/services.py): concurrent sessions and
a demo on the same RabbitMQ never consume each other's messages."""

from django.conf import settings

from core.queues import loadgen_queue, pool_queue, web_queue


def test_the_session_queues_carry_the_sessions_prefix():
    prefix = settings.CELERY_QUEUE_PREFIX
    assert prefix.startswith("test-") and prefix.endswith(".")
    assert pool_queue("simulated") == f"{prefix}pool.simulated"
    assert web_queue() == f"{prefix}web" and loadgen_queue("x") == f"{prefix}loadgen.x"
