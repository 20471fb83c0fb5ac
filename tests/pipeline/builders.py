"""Runs ready for the runner API, without a broker: dispatch's own run_prepare, with the
signature discarded (nothing is enqueued)."""

from __future__ import annotations

import gzip
import hashlib
import re

from django.core.files.base import ContentFile
from django.core.files.storage import storages

from runs.dispatch import run_prepare
from submissions import constants as c
from tests.pipeline.conftest import EXAMPLES
from tests.support.builders import make_org


def prepared_run(org=None, *, status: str = c.VALIDATED):
    """A submission of the simulated example and its prepared run; returns (run, token)."""
    from catalog.models import AIModel, HardwareSystem
    from submissions.models import Submission
    from submissions.schema import parse_config

    text = re.sub(
        r"profile: [a-z0-9.-]+", "profile: tiny", (EXAMPLES / "simulated.yaml").read_text()
    )
    config = parse_config(text, "application/yaml")
    submission = Submission.objects.create(
        org=org or make_org(),
        model=AIModel.objects.get(slug=config.model.id),
        hardware=HardwareSystem.objects.get(slug=config.hardware),
        config=config.model_dump(mode="json"),
        status=status,
        is_simulated=True,
    )
    run, signature = run_prepare(submission=submission)
    submission.status = c.QUEUED
    submission.save(update_fields=["status"])
    return run, signature.args[0]["api"]["token"]


def stored_records(run, index: int, *, attempt: int = 1, lines: int = 3) -> dict:
    """Put a raw-records object where the API's upload grant would, and describe it."""
    body = gzip.compress(b"".join(b'{"request_id": "r%d"}\n' % i for i in range(lines)), mtime=0)
    key = f"runs/{run.pk}/a{attempt}/raw/trial-{index:03d}.jsonl.gz"
    storage = storages["artifacts"]
    if storage.exists(key):
        storage.delete(key)
    storage.save(key, ContentFile(body))
    return {"key": key, "sha256": hashlib.sha256(body).hexdigest(), "size": len(body),
            "count": lines}  # fmt: skip


def trial_payload(run, index: int, concurrency: int, *, attempt: int = 1) -> dict:
    names = [t["name"] for t in run.run_spec["tiers"]]
    return {
        "index": index,
        "concurrency": concurrency,
        "phase": "ramp",
        "metrics": {
            "requests": 3,
            "ok": 3,
            "failed": 0,
            "requests_total": 3,
            "p25_output_speed": 50.0,
            "throughput_per_accelerator": 100.0,
            "accelerators": 1,
            "error_rate": 0.0,
        },  # fmt: skip
        "verdicts": {n: {"passed": i == 0, "reasons": []} for i, n in enumerate(names)},
        "raw_records": stored_records(run, index, attempt=attempt),
    }
