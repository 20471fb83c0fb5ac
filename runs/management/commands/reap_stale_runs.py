"""`manage.py reap_stale_runs [--loop SECONDS]`: retry or fail runs with stale heartbeats."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand

from runs.services import reap_stale_runs


class Command(BaseCommand):
    help = "Retry (or, after RUN_MAX_ATTEMPTS, fail) runs whose heartbeat is stale."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--stale-seconds", type=int, default=None)
        parser.add_argument("--loop", type=int, default=0, help="repeat every N seconds")

    def handle(self, *args, **options) -> None:
        while True:
            for run_id, action in reap_stale_runs(stale_s=options["stale_seconds"]):
                self.stdout.write(f"run #{run_id}: {action}")
            if not options["loop"]:
                return
            time.sleep(options["loop"])
