"""A whole benchmark run on virtual time, judged by the same checks the pipeline stores.

``simulated_run(cheat)`` runs the pool worker's own orchestration — the ``RunDirector`` of
runner/worker/director.py: qualification probes, the SLO search with /metrics scraped at
every window's start and end, trial reports with their raw records — against the tiny
simulated system in process (the ``simulated`` launcher on virtual time; ``cheat`` names
dishonest modes), reporting to a ``MemoryReporter`` instead of the runner API
(docs/pipeline.md "The director seam"). The run and its trials are then read back from what
the reporter holds, as the web side stores them (runs/services.py), and judged by
``agentperf.verification.report.report_checks``, the function the pipeline's report uses.

The run spec is dispatch's own: ``runs.dispatch.spec_of``, the function ``run_prepare``
builds every run's spec with (the launcher section, search options, time limits,
accelerators and load generation of a simulated submission, validated once), then
``spec_message``, as the pool worker receives it. Only the database and object storage are
left out: the submission is not saved, its tier set is the harness's ``TIERS`` and its
private test set the harness's small dataset, because these tests run without a database
(``run_prepare`` also looks up the tier set and writes the BenchmarkRun, its token hash and
the stored test set, which need one).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import tempfile
from collections.abc import Iterator
from typing import Any

from django.test import override_settings

from agentperf import contract
from agentperf.engine import rawrecords, targets
from agentperf.engine.datasets.synthetic import generate_dataset
from agentperf.engine.trajectory import Dataset, dataset_to_bytes
from agentperf.engine.trial import Tier
from agentperf.simulator.virtual import run_with_simulator
from agentperf.verification.checks import TrialData
from agentperf.verification.report import DatasetEvidence, RunEvidence, report_checks
from catalog.datasets import small_shape
from catalog.models import AIModel
from runner.worker.director import RunDirector
from runner.worker.reporter import MemoryReporter
from runs.dispatch import spec_message, spec_of
from submissions.models import Submission
from tests.support import dishonest

MODEL = "tiny-1b"
TIERS = [
    Tier("20", 20, 10.0),
    Tier("60", 60, 10.0),
    Tier("100", 100, 5.0),
    Tier("180", 180, 5.0),
]


@functools.lru_cache(maxsize=2)
def small_dataset(seed: int = 7, trajectories: int = 6) -> Dataset:
    """Prompts of a few hundred to ~2.5k tokens and short answers (catalog/datasets.py's
    small shape), generated once per process."""
    params = small_shape()
    return generate_dataset(
        seed=seed, trajectories=trajectories, params=params, name="verify-test", version="1"
    )


@functools.lru_cache(maxsize=2)
def dataset_file(seed: int = 7, trajectories: int = 6) -> bytes:
    """The small dataset as the file a pool host downloads (gzip JSONL)."""
    return dataset_to_bytes(small_dataset(seed, trajectories))


# A simulated submission's config as dispatch reads it: the tiny profile on one accelerator.
CONFIG: dict[str, Any] = {
    "topology": {"accelerators_used": 1, "accelerators_in_system": 1},
    "launcher": {"simulated": {"profile": "tiny", "seed": 0}},
}


def run_spec(
    dataset: Dataset, data: bytes, *, cap: int, max_trials: int, prime_cache: bool = False
) -> contract.RunSpec:
    """The task message of a simulated run on virtual time, built by dispatch
    (runs/dispatch.py) from an unsaved submission of ``CONFIG``: the settings make the tiny
    profile run on virtual time with these search options; its dataset section names
    ``data``."""
    search = {
        "warmup_s": 10.0,
        "duration_s": 40.0,
        "cap": cap,
        "max_trials": max_trials,
        "min_requests": 10,
        "tool_delay_scale": 0.5,
        "request_timeout_s": 600.0,
        "max_loop_lag_ms": 25.0,
        "max_cpu_percent": 90.0,
        "seed": 3,
        "ramp_s": 10.0,
        "prime_cache": prime_cache,
    }
    submission = Submission(pk=1, config=CONFIG, model=AIModel(slug=MODEL))
    with override_settings(
        SIM_REALTIME_MAX_ACCELERATORS=0,  # virtual time, whatever the profile's size
        RUN_SEARCH_OPTIONS_BY_POOL={"simulated-virtual": search},
        RUN_HEARTBEAT_INTERVAL_S=15,
    ):
        spec = spec_of(
            submission,
            tier_set=contract.TierSetRef(slug="verify-test", version=1),
            tiers=[t.to_dict() for t in TIERS],
        )
    dataset_ref = contract.DatasetRef(
        name=dataset.name,
        version=dataset.version,
        sha256=dataset.digest(),
        file_sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        url="memory:dataset",
    )
    return spec_message(spec.model_copy(update={"run_id": 1}), dataset=dataset_ref)


@contextlib.contextmanager
def simulator_with(cheat: str | None) -> Iterator[None]:
    """The simulator's target (``sim:PROFILE``, agentperf/engine/targets.py) serving with the
    dishonest modes ``cheat`` while the block runs; the installed one again after."""
    installed = targets.runner_for(targets.SIM_SCHEME)
    behaviour = dishonest.parse(cheat) if cheat else None
    targets.register(targets.SIM_SCHEME, functools.partial(run_with_simulator, behaviour=behaviour))
    try:
        yield
    finally:
        targets.register(targets.SIM_SCHEME, installed)


def direct(
    cheat: str | None = None, *, cap: int = 8, max_trials: int = 9, prime_cache: bool = False
) -> tuple[contract.RunSpec, MemoryReporter, dict[str, Any]]:
    """One simulated run through the RunDirector: (its task message, the reporter holding
    every document it sent, its outcome)."""
    data = dataset_file()
    spec = run_spec(small_dataset(), data, cap=cap, max_trials=max_trials, prime_cache=prime_cache)
    reporter = MemoryReporter(dataset_bytes=data)
    with simulator_with(cheat), tempfile.TemporaryDirectory(prefix="verify-run-") as work_dir:
        outcome = RunDirector(spec, reporter, work_dir=work_dir).run()
    return spec, reporter, outcome


def stored_trials(reporter: MemoryReporter) -> list[TrialData]:
    """The trials as the web side stores their reports (runs/services.py run_record_trial)
    and the report reads them back (runs/verification_report.py trial_data)."""
    return [
        TrialData(
            index=t.index,
            concurrency=t.concurrency,
            phase=t.phase,
            metrics=t.metrics.dump(),
            verdicts={name: v.dump() for name, v in t.verdicts.items()},
            telemetry=t.telemetry.dump(),
            records=rawrecords.decode(reporter.uploads[t.raw_records.key]),
            raw_records_key=t.raw_records.key,
            raw_records_count=t.raw_records.count,
        )
        for t in sorted(reporter.trials, key=lambda t: t.index)
    ]


def stored_run(
    spec: contract.RunSpec, reporter: MemoryReporter, config: dict[str, Any] | None
) -> RunEvidence:
    """What the web side stores of the reporter's documents (runs/services.py: start,
    qualification, complete), as the report's checks read it."""
    completion = reporter.completions[-1]
    runner_info: dict[str, Any] = {}
    for document in (*reporter.starts, *reporter.qualifications, completion):
        runner_info.update(document.runner_info.dump())
    dataset = spec.dataset
    assert dataset is not None
    return RunEvidence(
        # the stored spec as the web side reads it back (runs/models.py BenchmarkRun.spec)
        spec=contract.RunSpec.model_validate(spec.stored()),
        search_summary=completion.search_summary,
        qualification=[c.dump() for c in reporter.qualifications[-1].checks],
        telemetry=completion.telemetry.dump(),
        runner_info=runner_info,
        dataset=DatasetEvidence(
            name=dataset.name, version=dataset.version, sha256=dataset.sha256, private=True
        ),
        config=config or {},
    )


def simulated_run(
    cheat: str | None = None,
    *,
    cap: int = 8,
    config: dict[str, Any] | None = None,
    max_trials: int = 9,
    prime_cache: bool = False,
) -> dict[str, dict[str, Any]]:
    """{check name: check} of one simulated run (tiny profile, virtual time)."""
    spec, reporter, outcome = direct(cheat, cap=cap, max_trials=max_trials, prime_cache=prime_cache)
    assert outcome["status"] == "completed", (outcome, [f.reason for f in reporter.failures])
    run = stored_run(spec, reporter, config)
    trajectories = {t.id: t for t in small_dataset().trajectories}
    checks = report_checks(run, stored_trials(reporter), trajectories)
    return {c["name"]: c for c in checks}


def failing(checks: dict[str, dict[str, Any]]) -> set[str]:
    return {name for name, c in checks.items() if c["status"] == "fail"}
