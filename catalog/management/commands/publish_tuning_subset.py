"""`manage.py publish_tuning_subset`: store and list the public tuning subset (idempotent;
`make demo` runs it), so `/api/v1/datasets/` lists it and serves a download link."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from catalog.datasets import public_tuning_subset


class Command(BaseCommand):
    help = "Publish the public tuning subset (generated once, then reused)."

    def handle(self, *args, **options) -> None:
        dataset = public_tuning_subset()
        self.stdout.write(
            f"public dataset {dataset.name}@{dataset.version} (id {dataset.pk}, "
            f"{dataset.size} bytes, sha256 {dataset.sha256[:12]}…)"
        )
