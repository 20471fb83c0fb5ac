"""The RunDirector (runner/worker/director.py) with a MemoryReporter: what one attempt
sends, in what order, and what it sends when the run cannot go on (docs/pipeline.md "The
director seam"). The simulated launcher on virtual time: no server, no runner API."""

from __future__ import annotations

import gzip
import hashlib

import pytest

from agentperf import contract
from runner.launchers import Endpoint, LauncherError
from runner.worker.api_client import RunSuperseded
from runner.worker.director import RunDirector
from runner.worker.reporter import MemoryReporter, Started
from tests.verification.harness import dataset_file, direct, run_spec, small_dataset


def _spec() -> contract.RunSpec:
    return run_spec(small_dataset(), dataset_file(), cap=4, max_trials=3)


@pytest.fixture(scope="module")
def tiny_run():
    _, reporter, outcome = direct(None, cap=4, max_trials=3)
    return reporter, outcome


def test_a_run_reports_start_qualification_its_trials_in_index_order_then_completion(tiny_run):
    reporter, outcome = tiny_run
    assert outcome["status"] == "completed", reporter.failures
    n = len(reporter.trials)
    assert n >= 1 and outcome["trials"] == n
    assert [t.index for t in reporter.trials] == list(range(n))
    sequence = [path for path, _ in reporter.documents if path not in ("heartbeat", "uploads")]
    assert sequence == ["start", "qualification", *["trials"] * n, "complete"]
    assert reporter.failures == []
    summary = reporter.completions[0].search_summary
    assert [t.index for t in summary.trials] == list(range(n))


def test_each_trials_raw_records_are_uploaded_before_its_report_and_match_it(tiny_run):
    reporter, _ = tiny_run
    for report in reporter.trials:
        ref = report.raw_records
        blob = reporter.uploads[ref.key]
        assert hashlib.sha256(blob).hexdigest() == ref.sha256 and len(blob) == ref.size
        assert len(gzip.decompress(blob).splitlines()) == ref.count
        request = next(
            (i, r)
            for i, (path, r) in enumerate(reporter.documents)
            if path == "uploads"
            and isinstance(r, contract.UploadRequest)
            and r.trial_index == report.index
        )
        assert request[1].kind == "raw_records"
        reported = next(i for i, (_, d) in enumerate(reporter.documents) if d is report)
        assert request[0] < reported
        # the window's /metrics, scraped from the simulator in process at its start and end
        assert set(report.telemetry.dump()["server_metrics"]) >= {"start", "end"}


def test_the_heartbeat_carries_the_phases_and_the_trials_done(tiny_run):
    reporter, _ = tiny_run
    phases = [h.progress.phase for h in reporter.heartbeats]
    for phase in ("starting", "dataset", "launching", "qualification", "search", "completing"):
        assert phase in phases
    assert phases.index("qualification") < phases.index("search") < phases.index("completing")
    assert reporter.heartbeats[-1].progress.trials_done == len(reporter.trials)


class _StopWitness(MemoryReporter):
    """Notes, at each final report, whether the run's launcher had been stopped by then."""

    launcher: object = None

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.stopped_at_report: list[bool] = []

    def complete(self, document: contract.CompletionReport) -> None:
        self.stopped_at_report.append(self.launcher.stopped)
        super().complete(document)

    def fail(self, document: contract.FailureReport) -> str | None:
        self.stopped_at_report.append(self.launcher.stopped)
        return super().fail(document)


class _Stopped:
    """The real launcher for the spec (the simulator on virtual time), with a stop flag."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.devices = None
        self.stopped = False

    def start(self) -> Endpoint:
        return self.inner.start()

    def stop(self) -> None:
        self.stopped = True
        self.inner.stop()

    def log_bytes(self) -> bytes:
        return self.inner.log_bytes()

    def check(self) -> None:
        self.inner.check()


def test_the_deployment_is_stopped_before_the_run_reports_that_it_finished(tmp_path):
    """A run that reads `in_review` holds no server, container or Slurm job any more."""
    from runner.launchers import launcher_for

    spec = _spec()
    reporter = _StopWitness(dataset_bytes=dataset_file())
    inner = launcher_for(spec.launcher, log_dir=str(tmp_path), run_id=spec.run_id)
    reporter.launcher = launcher = _Stopped(inner)
    outcome = RunDirector(spec, reporter, work_dir=str(tmp_path), launcher=launcher).run()
    assert outcome["status"] == "completed", reporter.failures
    assert reporter.stopped_at_report == [True]
    phases = [h.progress.phase for h in reporter.heartbeats]
    assert phases.index("completing") < phases.index("stopping")


class _BrokenLauncher:
    kind = "broken"

    def __init__(self) -> None:
        self.devices = None
        self.stopped = False

    def start(self) -> Endpoint:
        raise LauncherError("the server exited with status 1 before answering /v1/models")

    def stop(self) -> None:
        self.stopped = True

    def log_bytes(self) -> bytes:
        return b"loading weights\nCUDA out of memory\n"

    def check(self) -> None:
        pass


def test_a_launcher_that_fails_is_reported_as_the_failure_with_its_log(tmp_path):
    reporter = _StopWitness(dataset_bytes=dataset_file())
    reporter.launcher = launcher = _BrokenLauncher()
    outcome = RunDirector(_spec(), reporter, work_dir=str(tmp_path), launcher=launcher).run()
    assert outcome["status"] == "failed"
    assert "exited with status 1 before answering" in outcome["reason"]
    [failure] = reporter.failures
    assert failure.reason == outcome["reason"]
    [log] = failure.logs
    assert gzip.decompress(reporter.uploads[log.key]) == launcher.log_bytes()
    assert reporter.qualifications == reporter.trials == reporter.completions == []
    assert reporter.stopped_at_report == [True]  # stopped before the failure was reported


def test_a_cancel_from_the_web_side_stops_the_run_before_any_load(tmp_path):
    reporter = MemoryReporter(dataset_bytes=dataset_file(), cancel=True)
    outcome = RunDirector(_spec(), reporter, work_dir=str(tmp_path)).run()
    assert outcome["status"] == "cancelled"
    [failure] = reporter.failures
    assert failure.reason.startswith("cancelled: ")
    assert reporter.qualifications == reporter.trials == reporter.completions == []


def test_a_dataset_that_does_not_match_the_spec_fails_the_run(tmp_path):
    reporter = MemoryReporter(dataset_bytes=gzip.compress(b"{}\n"))
    outcome = RunDirector(_spec(), reporter, work_dir=str(tmp_path)).run()
    assert outcome["status"] == "failed" and "sha256" in outcome["reason"]
    assert reporter.trials == [] and len(reporter.failures) == 1


class _Superseded(MemoryReporter):
    def start(self, document: contract.StartReport) -> Started:
        raise RunSuperseded(409, "attempt 2 owns this run")


def test_an_attempt_that_another_replaced_sends_nothing_more(tmp_path):
    reporter = _Superseded(dataset_bytes=dataset_file())
    outcome = RunDirector(_spec(), reporter, work_dir=str(tmp_path)).run()
    assert outcome == {
        "status": "skipped",
        "reason": "runner API 409: attempt 2 owns this run",
        "run_status": None,  # another attempt owns it: this one claims no final state
    }
    assert reporter.documents == []
