"""The Celery app. JSON only, late acks, one message at a time per worker process."""

from __future__ import annotations

import os

from celery import Celery
from kombu import Exchange, Queue

from core.queues import web_queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("agentperf")


@app.on_configure.connect
def _configure(sender: Celery, **_: object) -> None:
    from django.conf import settings

    visibility = settings.CELERY_BROKER_VISIBILITY_TIMEOUT_S
    # A pool host started with these settings derives run tokens with the default key,
    # unless its operator gave it its pool's own (docs/security.md "Run tokens and upload
    # grants"); runner/ reads only the environment.
    os.environ.setdefault("RUNNER_TOKEN_KEY", settings.RUNNER_TOKEN_KEY)
    sender.conf.update(
        broker_url=settings.CELERY_BROKER_URL,
        result_backend=settings.CELERY_RESULT_BACKEND,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_soft_time_limit=settings.RUN_SOFT_TIME_LIMIT_S,
        task_time_limit=settings.RUN_HARD_TIME_LIMIT_S,
        # Redis (and SQS) redeliver an unacked message after the visibility timeout, so it
        # must outlast the longest run. RabbitMQ redelivers on connection loss instead (its
        # consumer_timeout must also exceed the longest run; see README). The SQLite
        # transport passes its options to SQLAlchemy, which rejects this one.
        broker_transport_options=(
            {} if settings.BROKER_PROFILE.startswith("sqla") else {"visibility_timeout": visibility}
        ),
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=3,
        task_default_queue=web_queue(),
        task_queues=(Queue(web_queue(), Exchange(web_queue()), routing_key=web_queue()),),
        task_create_missing_queues=True,
        task_always_eager=settings.CELERY_TASK_ALWAYS_EAGER,
        result_expires=3600,
        # `celery -A config beat` (make beat): the reaper retries or fails stale runs.
        beat_schedule={
            "reap-stale-runs": {
                "task": "runs.reap_stale_runs",
                "schedule": float(settings.RUN_REAPER_INTERVAL_S),
                "options": {"queue": web_queue(), "expires": float(settings.RUN_REAPER_INTERVAL_S)},
            },
            # the sweep behind ladders.receivers: a ladder whose refresh was never queued
            "refresh-ladders": {
                "task": "ladders.refresh",
                "schedule": float(settings.LADDER_REFRESH_INTERVAL_S),
                "options": {
                    "queue": web_queue(),
                    "expires": float(settings.LADDER_REFRESH_INTERVAL_S),
                },
            },
        },
        worker_hijack_root_logger=False,
        timezone="UTC",
    )


app.autodiscover_tasks(["leaderboard", "ladders", "submissions", "runs", "runner.worker"])
