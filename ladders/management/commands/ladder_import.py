"""manage.py ladder_import LADDER_JSON --org SLUG --model SLUG --hardware SLUG: publish the
ladder.json of ``python -m agentperf.engine ladder`` (labelled as an engine ladder, and
simulated when its rungs were)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from catalog.models import AIModel, HardwareSystem
from ladders.models import Ladder
from ladders.services import ladder_import
from submissions.models import Organization
from submissions.schema import ConfigError


class Command(BaseCommand):
    help = "Publish an engine ladder.json (python -m agentperf.engine ladder)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("path")
        parser.add_argument("--org", required=True, help="organization slug")
        parser.add_argument("--model", required=True, help="model slug")
        parser.add_argument("--hardware", required=True, help="hardware slug")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            doc = json.loads(Path(opts["path"]).read_text())
        except (OSError, ValueError) as exc:
            raise CommandError(f"{opts['path']}: {exc}") from None
        org = Organization.objects.filter(slug=opts["org"]).first()
        model = AIModel.objects.filter(slug=opts["model"]).first()
        hardware = HardwareSystem.objects.filter(slug=opts["hardware"]).first()
        for what, obj in (("org", org), ("model", model), ("hardware", hardware)):
            if obj is None:
                raise CommandError(f"--{what} {opts[what]!r}: not found")
        existing = Ladder.objects.filter(
            source=Ladder.SOURCE_ENGINE, name=doc.get("name"), org=org
        ).first()
        if existing is not None:
            self.stdout.write(f"ladder #{existing.pk} already imported: /ladders/{existing.pk}/")
            return
        try:
            ladder = ladder_import(org=org, doc=doc, model=model, hardware=hardware)
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"ladder #{ladder.pk} published: /ladders/{ladder.pk}/")
