"""`manage.py export_public`: a versioned bundle (JSON + CSV) of every published result,
its points and provenance in artifact storage; /data/ links the newest (docs/api.md)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from leaderboard.export import export_public


class Command(BaseCommand):
    help = "Write the public data dump (results.json, results.csv, points.csv, manifest.json)."

    def handle(self, *args, **options) -> None:
        manifest = export_public()
        counts = manifest["counts"]
        self.stdout.write(
            f"{manifest['folder']}: {counts['results']} results, {counts['points']} points"
        )
