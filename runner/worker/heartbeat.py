"""The run's heartbeat (docs/pipeline.md "The director seam"): the shared progress reported
from a thread every interval, so a long trial still beats, and the web side's answer (a
cancel, another attempt owning the run) kept for the director to act on between steps."""

from __future__ import annotations

import logging
import threading
from typing import Any

from agentperf import contract
from runner.worker.api_client import RunnerApiError, RunSuperseded
from runner.worker.failures import RunCancelled
from runner.worker.reporter import Reporter

log = logging.getLogger(__name__)


class Heartbeat:
    """Reports the shared progress every `interval_s` from a thread, so a long trial still
    beats; remembers a cancel request from the web side."""

    def __init__(self, reporter: Reporter, interval_s: float) -> None:
        self.reporter = reporter
        self.interval_s = interval_s
        self.progress: dict[str, Any] = {}
        # the progress as the contract read it at its last update (what every beat sends)
        self._document: contract.Heartbeat | None = None
        self.cancelled = False
        self.superseded = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def update(self, **fields: Any) -> None:
        with self._lock:
            merged = {**self.progress, **fields}
            # read once, here: a wrong field fails the update, not a later beat
            progress = contract.Progress.model_validate(merged)
            self.progress = merged
            self._document = contract.Heartbeat(progress=progress)
        self.beat()

    def beat(self) -> None:
        with self._lock:
            document = self._document
        if document is None:  # no progress yet: nothing to say
            return
        try:
            cancel = self.reporter.heartbeat(document)
        except RunSuperseded:
            self.superseded = True
            return
        except RunnerApiError as exc:  # a missed beat is not fatal; the next one may land
            log.warning("heartbeat failed: %s", exc)
            return
        if cancel:
            self.cancelled = True

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.beat()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def check(self) -> None:
        if self.superseded:
            raise RunSuperseded(409, "another attempt owns this run")
        if self.cancelled:
            raise RunCancelled("the run was cancelled on the web side")
