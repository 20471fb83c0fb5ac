"""Where a run's documents go: the `Reporter` a `RunDirector` reports through
(docs/pipeline.md "The director seam").

`ApiReporter` is the pool worker's: every document is a runner API call with the run's
token (runner/worker/api_client.py), uploads go through presigned grants, the dataset
comes from the host's cache. `MemoryReporter` keeps every contract document in lists and
every upload as bytes, in process: the verification harness (tests/verification/harness.py)
and the director's own tests drive the real orchestration with it.

A reporter raises `RunSuperseded` when another attempt owns the run (the director stops
quietly) and `RunnerApiError` when a report is refused or lost.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentperf import contract
from agentperf.engine.trajectory import Dataset
from runner.worker.api_client import RunnerApi
from runner.worker.datasets import checked_dataset, fetch_dataset


@dataclass(slots=True)
class Started:
    """The answer to ``start``: this attempt's number and the trials already stored (a
    redelivered run resumes after them)."""

    attempt: int
    trials: list[dict[str, Any]] = field(default_factory=list)


class Reporter(Protocol):
    """The web side as a run's director sees it: one method per runner API document."""

    def start(self, document: contract.StartReport) -> Started: ...

    def heartbeat(self, document: contract.Heartbeat) -> bool:
        """Post the progress; True when the web side asks the run to stop (cancelled)."""
        ...

    def qualification(self, document: contract.QualificationReport) -> None: ...

    def trial(self, document: contract.TrialReport) -> None: ...

    def upload(self, request: contract.UploadRequest, content: bytes) -> str:
        """Store ``content`` as ``request`` declares it; the object's key."""
        ...

    def complete(self, document: contract.CompletionReport) -> None: ...

    def fail(self, document: contract.FailureReport) -> str | None:
        """Report the end of a failed or cancelled attempt; the run's status after it."""
        ...

    def dataset(self, ref: contract.DatasetRef) -> Dataset:
        """The run's private test set, checked against both of ``ref``'s digests."""
        ...

    def runner_api(self) -> RunnerApi | None:
        """The runner API client, for load-generator hosts that report to it themselves
        (docs/engine.md "Sharded trials"); None where there is no runner API."""
        ...


class ApiReporter:
    """The runner API over HTTP with the run's token: what the Celery task uses."""

    def __init__(self, api: RunnerApi) -> None:
        self.api = api

    def start(self, document: contract.StartReport) -> Started:
        answer = self.api.report("start", document)
        self.api.attempt = int(answer["attempt"])  # every later call carries it
        return Started(attempt=self.api.attempt, trials=list(answer.get("trials") or []))

    def heartbeat(self, document: contract.Heartbeat) -> bool:
        return bool(self.api.report("heartbeat", document).get("cancel"))

    def qualification(self, document: contract.QualificationReport) -> None:
        self.api.report("qualification", document)

    def trial(self, document: contract.TrialReport) -> None:
        self.api.report("trials", document)

    def upload(self, request: contract.UploadRequest, content: bytes) -> str:
        grant = self.api.call("POST", "uploads", request.dump())
        self.api.upload(grant["upload"], content)
        return str(grant["key"])

    def complete(self, document: contract.CompletionReport) -> None:
        self.api.report("complete", document)

    def fail(self, document: contract.FailureReport) -> str | None:
        status = self.api.report("fail", document).get("status")
        return str(status) if status else None

    def dataset(self, ref: contract.DatasetRef) -> Dataset:
        return fetch_dataset(self.api, ref.dump())

    def runner_api(self) -> RunnerApi | None:
        return self.api


class MemoryReporter:
    """Every document in lists, in the order received (``documents`` holds them all as
    ``(path, document)``, the runner API's path names), every upload's bytes by key.

    ``dataset_bytes`` is the dataset file the run reads (checked like a downloaded one);
    ``prior_trials`` what ``start`` answers as already stored; ``cancel`` what every
    heartbeat answers. Thread-safe: the heartbeat thread reports beside the run."""

    def __init__(
        self,
        *,
        dataset_bytes: bytes = b"",
        prior_trials: list[dict[str, Any]] | None = None,
        attempt: int = 1,
        cancel: bool = False,
    ) -> None:
        self.dataset_bytes = dataset_bytes
        self.prior_trials = list(prior_trials or [])
        self.attempt = attempt
        self.cancel = cancel
        self.documents: list[tuple[str, contract.Contract]] = []
        self.starts: list[contract.StartReport] = []
        self.heartbeats: list[contract.Heartbeat] = []
        self.qualifications: list[contract.QualificationReport] = []
        self.trials: list[contract.TrialReport] = []
        self.upload_requests: list[contract.UploadRequest] = []
        self.uploads: dict[str, bytes] = {}
        self.completions: list[contract.CompletionReport] = []
        self.failures: list[contract.FailureReport] = []
        self._lock = threading.Lock()

    def _keep(self, path: str, document: contract.Contract, into: list[Any]) -> None:
        with self._lock:
            self.documents.append((path, document))
            into.append(document)

    def start(self, document: contract.StartReport) -> Started:
        self._keep("start", document, self.starts)
        return Started(attempt=self.attempt, trials=list(self.prior_trials))

    def heartbeat(self, document: contract.Heartbeat) -> bool:
        self._keep("heartbeat", document, self.heartbeats)
        return self.cancel

    def qualification(self, document: contract.QualificationReport) -> None:
        self._keep("qualification", document, self.qualifications)

    def trial(self, document: contract.TrialReport) -> None:
        self._keep("trials", document, self.trials)

    def upload(self, request: contract.UploadRequest, content: bytes) -> str:
        with self._lock:
            key = f"memory/{request.kind}/{len(self.upload_requests)}"
            self.documents.append(("uploads", request))
            self.upload_requests.append(request)
            self.uploads[key] = bytes(content)
        return key

    def complete(self, document: contract.CompletionReport) -> None:
        self._keep("complete", document, self.completions)

    def fail(self, document: contract.FailureReport) -> str | None:
        self._keep("fail", document, self.failures)
        return "cancelled" if document.reason.startswith("cancelled:") else "failed"

    def dataset(self, ref: contract.DatasetRef) -> Dataset:
        return checked_dataset(self.dataset_bytes, ref.dump())

    def runner_api(self) -> RunnerApi | None:
        return None
