"""`manage.py twin_accuracy`: rebuild the twin's accuracy page (`/twin/accuracy/`) from the
committed hold-out and fit records of every bundled profile (docs/simulator.md "Accuracy").

Prints each profile's status, MAPE and reason; simulated results of a profile whose status
moved are relabelled on every page at once."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from agentperf.simulator.accuracy import accuracy_table
from leaderboard.accuracy import twin_accuracy_rebuild


class Command(BaseCommand):
    help = "Rebuild /twin/accuracy/ from the twin profiles' committed hold-out and fit records."

    def handle(self, *args: object, **options: object) -> None:
        table = accuracy_table()
        report = twin_accuracy_rebuild(table)
        for acc in table:
            if not acc.figures:
                mape = "no held-out figure"
            else:
                mape = "no figure reached" if acc.mape is None else f"MAPE {acc.mape:.1%}"
            self.stdout.write(f"{acc.profile}: {acc.status} ({mape}; {acc.reason})")
        changed = ", ".join(report.changed) or "none"
        self.stdout.write(
            f"{report.profiles} profiles, {report.admitted} admitted; status changed: {changed}"
        )
