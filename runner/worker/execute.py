"""One benchmark run on a pool worker: the Celery task's entry (runner/worker/tasks.py).

`execute_run(spec)` is what the Celery task calls. It never touches the database: it reads
the run spec and hands it to a `RunDirector` (runner/worker/director.py: launcher → probes →
search → completion) whose `ApiReporter` (runner/worker/reporter.py) reports through the
runner API with the run's token and uploads raw request records through presigned URLs the
API hands out (docs/pipeline.md "The director seam"). A redelivered or retried task calls
the same function; the API's `start` returns the trials already stored, and the search
resumes after them.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import ValidationError

from agentperf import contract
from runner.worker.api_client import RunnerApi
from runner.worker.director import RunDirector
from runner.worker.failures import RunFailure
from runner.worker.reporter import ApiReporter

SPEC_VERSION = contract.SPEC_VERSION


def parse_spec(message: dict[str, Any]) -> contract.RunSpec:
    """The task message's run spec read through the contract, once, on receipt (the
    message is JSON: docs/pipeline.md "The run spec"); a RunFailure names the fields that
    do not fit."""
    try:
        return contract.RunSpec.model_validate(message)
    except ValidationError as exc:
        raise RunFailure(
            f"the run spec does not fit the contract: {contract.error_fields(exc)}"
        ) from None


class RunExecution:
    """One attempt on a pool host: the run spec's director, reporting to the runner API
    named in the spec's ``api`` section; `run()` does the work."""

    def __init__(self, spec: dict[str, Any], *, work_dir: str | None = None) -> None:
        run_spec = parse_spec(spec)
        if run_spec.api is None:
            raise RunFailure("the run spec carries no api section")
        self.api = RunnerApi.for_run(run_spec.api, run_spec.run_id)
        self.director = RunDirector(run_spec, ApiReporter(self.api), work_dir=work_dir)

    def run(self) -> dict[str, Any]:
        return self.director.run()


def execute_run(spec: dict[str, Any], *, work_dir: str | None = None) -> dict[str, Any]:
    """Run the benchmark described by `spec`; returns a short outcome (never raises for a
    run failure: failures are reported to the runner API)."""
    started = time.monotonic()
    outcome = RunExecution(spec, work_dir=work_dir).run()
    outcome["elapsed_s"] = round(time.monotonic() - started, 1)
    return outcome
