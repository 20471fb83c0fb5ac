"""Runs ready for the runner API, without a broker: dispatch's own run_prepare, with the
signature discarded (nothing is enqueued)."""

from __future__ import annotations

import gzip
import hashlib
import re

from django.core.files.base import ContentFile
from django.core.files.storage import storages

from agentperf import contract
from agentperf.engine.search import SearchTrial
from agentperf.engine.trial import TierVerdict
from demo.synthetic import make_org, trial_metrics
from runs.dispatch import run_prepare, run_token_for
from submissions import constants as c
from tests.pipeline.conftest import EXAMPLES


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
    # the token a pool host derives from the message's seed (docs/security.md "Run tokens
    # and upload grants")
    return run, run_token_for(run, signature.args[0]["api"]["seed"])


def stored_records(run, index: int, *, attempt: int = 1, lines: int = 3) -> dict:
    """Put a raw-records object where the API's upload grant would, and describe it (the
    contract's RawRecordsRef, docs/pipeline.md "The contract")."""
    body = gzip.compress(b"".join(b'{"request_id": "r%d"}\n' % i for i in range(lines)), mtime=0)
    key = f"runs/{run.pk}/a{attempt}/raw/trial-{index:03d}.jsonl.gz"
    storage = storages["artifacts"]
    if storage.exists(key):
        storage.delete(key)
    storage.save(key, ContentFile(body))
    return contract.RawRecordsRef(
        key=key, sha256=hashlib.sha256(body).hexdigest(), size=len(body), count=lines
    ).dump()


def trial_payload(run, index: int, concurrency: int, *, attempt: int = 1) -> dict:
    """A trial report as the worker builds it: the engine's own summary and verdicts
    (the first tier passes, the others fail) through the contract's TrialReport."""
    names = [t["name"] for t in run.run_spec["tiers"]]
    return contract.TrialReport(
        index=index,
        concurrency=concurrency,
        phase="ramp",
        metrics=contract.TrialMetrics.model_validate(
            trial_metrics(speed=50.0, throughput=100.0, ttft_p75=1.0, accelerators=1, requests=3)
        ),
        verdicts={
            n: contract.TierVerdict.of(TierVerdict(passed=i == 0)) for i, n in enumerate(names)
        },
        telemetry=contract.TrialTelemetry(measured=False, reason="not measured: test"),
        raw_records=contract.RawRecordsRef.model_validate(
            stored_records(run, index, attempt=attempt)
        ),
    ).dump()


def runner_info(**extra) -> dict:
    """The worker's RunnerInfo (runner/worker/director.py runner_info)."""
    from runner.worker.qualification import runner_info as worker_info

    return worker_info().model_copy(update=extra).dump()


def progress(**fields) -> dict:
    """A heartbeat as the worker beats it."""
    return contract.Heartbeat(progress=contract.Progress(phase="search", **fields)).dump()


def completion(run, *, flags: tuple[str, ...] = ()) -> dict:
    """``POST complete`` for the trials stored so far: the engine's own search result."""
    from agentperf.engine.search import SearchResult, tier_results

    trials = [
        SearchTrial.from_dict(
            {
                "index": t.index,
                "concurrency": t.concurrency,
                "phase": t.phase,
                "verdicts": {k: v.passed for k, v in contract.trial_verdicts(t.verdicts).items()},
            }
        )
        for t in run.trials.order_by("index")
    ]
    names = [t["name"] for t in run.run_spec["tiers"]]
    cap = max((t.concurrency for t in trials), default=1)
    result = SearchResult(trials, tier_results(trials, names, cap=cap), cap=cap, flags=list(flags))
    return contract.CompletionReport(
        search_summary=contract.SearchSummary.of(result),
        telemetry=contract.HostInventory(measured=False, reason="none", accelerators=[]),
        logs=[],
        runner_info=contract.RunnerInfo.model_validate(runner_info()),
    ).dump()
