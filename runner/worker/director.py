"""The orchestration of one benchmark run: launcher → probes → search → completion
(docs/pipeline.md "The director seam").

`RunDirector(spec, reporter).run()` runs the steps of one attempt of the run spec (the
contract's model, parsed once by the worker on receipt: runner/worker/execute.py) and sends
every document through a `Reporter` (runner/worker/reporter.py): the pool worker's
`ApiReporter` (the runner API with the run's token, uploads through presigned grants), or a
`MemoryReporter` in process (the verification harness, the director's tests). It never
touches the database. A redelivered or retried run starts the same way; the reporter's
`start` returns the trials already stored, and the search resumes after them
(`run_search(prior_trials=...)`).

What the steps use lives by meaning beside it: the heartbeat (runner/worker/heartbeat.py),
the qualification (runner/worker/qualification.py), a trial's settings and report
(runner/worker/trials.py).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import logging
import tempfile
import threading
from typing import Any

from agentperf import contract
from agentperf.engine.jobs import search_job
from agentperf.engine.openloop import auto_rate_step, open_loop_summary, steps_for
from agentperf.engine.replay import ARRIVAL_OPEN
from agentperf.engine.search import SearchResult, SearchTrial
from agentperf.engine.sharding import Sharding
from agentperf.engine.trajectory import Dataset
from agentperf.engine.transport import Transport
from agentperf.engine.trial import Tier, TrialConfig, TrialResult
from agentperf.verification.fingerprint import load_reference
from agentperf.verification.speculative import parse_metrics, scrape_metrics
from agentperf.verification.taskcheck import load_problems
from runner.launchers import Endpoint, LauncherError, launcher_for
from runner.launchers.base import LAUNCHES_SERVER, Launcher
from runner.launchers.devices import DeviceGrant, DevicePool
from runner.telemetry import TelemetrySampler
from runner.telemetry.engine_metrics import EngineMetricsSampler
from runner.verification.probes import fatal_failures
from runner.worker.api_client import RunnerApiError, RunSuperseded
from runner.worker.datasets import DatasetMismatch
from runner.worker.failures import RunCancelled, RunFailure
from runner.worker.heartbeat import Heartbeat
from runner.worker.host_inventory import collect_inventory
from runner.worker.qualification import (
    context_preflight,
    qualification_report,
    qualify,
    runner_info,
    task_check,
)
from runner.worker.reporter import Reporter
from runner.worker.trials import (
    CountersInProcess,
    dataset_ref,
    records_blob,
    scrape_counters,
    sharding_for,
    target_of,
    trial_config,
    trial_report,
)

log = logging.getLogger(__name__)


@dataclasses.dataclass
class RunState:
    """What the steps of one attempt share (RunDirector._run), filled in as they go: the
    deployment and the data, the qualification, the search's settings, and per trial the
    uploads and scrapes its callbacks hand from one to the next."""

    launcher: Launcher
    prior: list[dict[str, Any]]
    dataset: Dataset | None = None
    endpoint: Endpoint | None = None
    checks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    info: contract.RunnerInfo | None = None
    task_problems: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    tiers: list[Tier] = dataclasses.field(default_factory=list)
    base: TrialConfig | None = None
    sharding: Sharding | None = None
    simulator: bool = False
    # the trial under way, its uploaded records and telemetry, its /metrics scrapes
    current_index: int = 0
    uploaded: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    scrapes: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    threads: dict[int, list[threading.Thread]] = dataclasses.field(default_factory=dict)
    result: SearchResult | None = None
    open_loop: dict[str, Any] | None = None
    outcome: dict[str, Any] = dataclasses.field(default_factory=dict)

    def ready(self) -> tuple[Endpoint, Dataset]:
        """The deployment and the dataset, once launched and loaded."""
        if self.endpoint is None or self.dataset is None:
            raise RuntimeError("the run's deployment or dataset is not ready yet")
        return self.endpoint, self.dataset

    def trial_base(self) -> TrialConfig:
        if self.base is None:
            raise RuntimeError("the search is not prepared yet")
        return self.base

    def search_result(self) -> SearchResult:
        if self.result is None:
            raise RuntimeError("the search has not run yet")
        return self.result


class RunDirector:
    """The steps of one attempt of a run, each document sent through ``reporter``;
    `run()` does the work and returns a short outcome (it never raises for a run failure:
    failures are reported). ``launcher`` replaces the spec's (runner/launchers
    ``launcher_for``), as a test's failing one does."""

    def __init__(
        self,
        spec: contract.RunSpec,
        reporter: Reporter,
        *,
        work_dir: str | None = None,
        launcher: Launcher | None = None,
    ) -> None:
        self.spec = spec
        self.reporter = reporter
        run_id = self.spec.run_id
        self.work_dir = work_dir or tempfile.mkdtemp(prefix=f"agentperf-run-{run_id}-")
        self.launcher = launcher
        self.heartbeat = Heartbeat(reporter, self.spec.heartbeat_interval_s)
        self.sampler = TelemetrySampler(interval_s=self.spec.telemetry_interval_s)
        # the launched server's own /metrics through the run (docs/pipeline.md "Engine metrics")
        self.engine_metrics: EngineMetricsSampler | None = None
        self.grant: DeviceGrant | None = None
        self.inventory: dict[str, Any] | None = None

    def _grant_devices(self, launcher: Launcher) -> None:
        """A launched server gets exactly the accelerators its topology uses, from what this
        worker's pool declares (runner/launchers/devices.py); a LauncherError when it has
        fewer. Attached and simulated endpoints get none (nothing is launched here)."""
        if launcher.kind not in LAUNCHES_SERVER:
            return
        accelerators = self.spec.accelerators
        per_worker = list(accelerators.per_worker or [accelerators.used])
        self.grant = DevicePool.from_env().grant(per_worker)
        launcher.devices = self.grant
        minors = self.grant.minors()
        if self.grant.accelerators and len(minors) == len(self.grant.accelerators):
            self.sampler.minors = minors  # power and energy of the granted GPUs only

    def _collect_inventory(self, endpoint: Endpoint) -> None:
        """What served, read once the server answers (runner/worker/host_inventory.py); a host
        that cannot read it records none (the inventory check then warns), never fails."""
        if endpoint.virtual or endpoint.info.get("launcher") == "simulated":
            return  # a twin's host is not the system it stands for
        if endpoint.info.get("launcher") == "slurm":
            # served on the job's nodes, not here: each node's inventory is in the job's
            # layout, and the launcher refused a job whose tasks' GPUs do not add up to the
            # accelerators used (docs/pipeline.md "Slurm")
            return
        try:
            self.inventory = collect_inventory(endpoint, self.grant, log_text=self._log_text())
        except Exception:
            log.exception("run %s: inventory not collected", self.spec.run_id)

    def _log_text(self) -> str:
        """The launched server's output so far (vLLM prints its effective config there)."""
        if self.launcher is None:
            return ""
        try:
            return self.launcher.log_bytes()[-200_000:].decode("utf-8", "replace")
        except Exception:  # a launcher without a log: settings from the server alone
            return ""

    def _start_engine_metrics(self, endpoint: Endpoint) -> None:
        """Scrape a launched or attached server's /metrics through the run (its gauges and
        counters over time, runner/telemetry/engine_metrics.py); a twin has its own figures."""
        if endpoint.virtual or not endpoint.base_url:
            return
        if endpoint.info.get("launcher") not in ("process", "container", "attached"):
            return

        def scrape() -> str:
            return scrape_metrics(
                str(endpoint.base_url), api_key=endpoint.api_key, connect=endpoint.connect
            )

        self.engine_metrics = EngineMetricsSampler(
            scrape, interval_s=max(0.5, float(self.spec.telemetry_interval_s))
        )
        self.engine_metrics.start()

    def _upload(self, kind: str, content: bytes, **extra: Any) -> dict[str, Any]:
        digest = hashlib.sha256(content).hexdigest()
        # what the runner API checks it against (contract.UploadRequest)
        meta = contract.UploadRequest.model_validate(
            {"kind": kind, "sha256": digest, "size": len(content), **extra}
        )
        key = self.reporter.upload(meta, content)
        return {"key": key, "sha256": digest, "size": len(content), **extra}

    def run(self) -> dict[str, Any]:
        """Run the attempt; the outcome's ``status`` is what this attempt did (completed,
        failed, cancelled, superseded, skipped) and ``run_status`` how the run ended on the
        web side as the web side said it (done, failed, cancelled), or None when this
        attempt does not know: another attempt owns the run, or the last report was lost
        and the reaper decides (docs/pipeline.md "Contention")."""
        try:
            started = self.reporter.start(contract.StartReport(runner_info=runner_info()))
        except RunSuperseded as exc:
            log.info("run %s not started: %s", self.spec.run_id, exc)
            return {"status": "skipped", "reason": str(exc), "run_status": exc.run_status}
        prior = started.trials
        self.heartbeat.update(phase="starting", attempt=started.attempt, trials_done=len(prior))
        self.heartbeat.start()
        launcher = self.launcher = self.launcher or launcher_for(
            self.spec.launcher,
            log_dir=self.work_dir,
            run_id=self.spec.run_id,
            hard_s=self.spec.limits.hard_s,
        )
        outcome: dict[str, Any]
        try:
            outcome = self._run(launcher, prior)
        except RunSuperseded as exc:
            outcome = {"status": "superseded", "reason": str(exc), "run_status": exc.run_status}
        except RunCancelled as exc:
            self._release(launcher)
            outcome = self._cancelled(str(exc))
        except (RunFailure, DatasetMismatch, LauncherError) as exc:
            outcome = self._fail(str(exc), launcher)
        except Exception as exc:
            log.exception("run %s crashed", self.spec.run_id)
            outcome = self._fail(f"runner error: {type(exc).__name__}: {exc}"[:2000], launcher)
        finally:
            self.heartbeat.stop()
            self.sampler.stop()
            if self.engine_metrics is not None:
                self.engine_metrics.stop()
            launcher.stop()
        return outcome

    def _cancelled(self, reason: str) -> dict[str, Any]:
        """Tell the web side the run stopped, so it ends `cancelled` with a finish time."""
        document = contract.FailureReport(reason=f"cancelled: {reason}"[:5000])
        return {"status": "cancelled", "reason": reason, "run_status": self._report_end(document)}

    def _report_end(self, document: contract.FailureReport) -> str | None:
        """Send the failure report; the run's status as the web side then holds it (failed,
        or cancelled for a withdrawn submission; what it had ended as already when it had),
        None when the report was lost: the reaper then ends the run."""
        try:
            return self.reporter.fail(document)
        except RunSuperseded as exc:
            return exc.run_status
        except RunnerApiError as exc:
            log.warning("could not report the end of run %s: %s", self.spec.run_id, exc)
            return None

    def _release(self, launcher: Launcher) -> None:
        """Stop what the run launched before the final report: a run that reads as finished
        holds no server, container or Slurm job (stop() is idempotent; `run` calls it again
        in its `finally`), and the stored log ends with the server's shutdown."""
        self.heartbeat.update(phase="stopping")
        try:
            launcher.stop()
        except Exception:  # the report still goes out; the pool host's reaper sweeps later
            log.exception("run %s: stopping its deployment failed", self.spec.run_id)

    def _fail(self, reason: str, launcher: Launcher) -> dict[str, Any]:
        self._release(launcher)
        logs = self._upload_log(launcher)
        ended = self._report_end(contract.FailureReport(reason=reason[:5000], logs=logs))
        if ended == "done":  # the completion had landed; its answer was what failed
            return {"status": "completed", "reason": reason, "run_status": ended}
        return {"status": "failed", "reason": reason, "run_status": ended}

    def _upload_log(self, launcher: Launcher) -> list[contract.ArtifactRef]:
        content = launcher.log_bytes()
        if not content:
            return []
        try:
            stored = self._upload("log", gzip.compress(content[-50_000_000:], mtime=0))
            return [contract.ArtifactRef(**stored)]
        except RunnerApiError as exc:
            log.warning("launcher log upload failed: %s", exc)
            return []

    def _task_problems(self, reference: dict[str, Any] | None) -> list[dict[str, Any]]:
        """The HumanEval problems to run: none without a reference task score; else the
        first `task_problems` (search option) of those the reference scored."""
        wanted = self.spec.search.task_problems
        if reference is None or wanted <= 0:
            return []
        scored = {o["task_id"] for o in (reference.get("tasks") or {}).get("outcomes") or []}
        return [p for p in load_problems() if p["task_id"] in scored][:wanted]

    def _open_loop(
        self,
        endpoint: Endpoint,
        dataset: Dataset,
        base: TrialConfig,
        tiers: list[Tier],
        sharding: Sharding | None,
    ) -> dict[str, Any]:
        """The open-loop search beside the closed one (search option ``arrival: open``,
        docs/engine.md "Arrival modes"): the same dataset, tiers and trial settings,
        sessions arriving at a searched rate; its summary goes into the search summary."""
        search = self.spec.search
        replay = dataclasses.replace(
            base.replay,
            arrival=ARRIVAL_OPEN,
            namespace_salt=f"{base.replay.namespace_salt}open.",
        )
        open_base = dataclasses.replace(base, replay=replay)
        step = search.rate_step or auto_rate_step(
            dataset.trajectories, base.duration_s, base.min_requests
        )
        max_trials = search.max_trials

        def progress(phase: str, index: int, n: int) -> None:
            self.heartbeat.check()
            self.heartbeat.update(
                phase="open loop", search_phase=phase, trial=index + 1, max_trials=max_trials
            )

        result = search_job(
            target=target_of(endpoint),
            trajectories=dataset.trajectories,
            tiers=tiers,
            base=open_base,
            cap=steps_for(search.rate_cap, step),
            progress=progress,
            max_trials=max_trials,
            sharding=sharding,
            rate_step=step,
        )
        return open_loop_summary(result, step)

    def _run(self, launcher: Launcher, prior: list[dict[str, Any]]) -> dict[str, Any]:
        """One attempt, as its named steps in order; what they share is one RunState."""
        state = RunState(launcher=launcher, prior=prior)
        for step in (
            self._load_dataset,
            self._launch,
            self._qualify,
            self._prepare_search,
            self._search,
            self._check_tasks_under_load,
            self._search_open_loop,
            self._complete,
        ):
            step(state)
        return state.outcome

    # --- the steps -------------------------------------------------------------------------

    def _load_dataset(self, state: RunState) -> None:
        self.heartbeat.update(phase="dataset")
        state.dataset = self.reporter.dataset(dataset_ref(self.spec))

    def _launch(self, state: RunState) -> None:
        self.heartbeat.update(phase="launching")
        self._grant_devices(state.launcher)
        state.endpoint = state.launcher.start()
        self._collect_inventory(state.endpoint)
        self.heartbeat.check()

    def _qualify(self, state: RunState) -> None:
        """The probes before any load; a fatal one fails the run naming it."""
        endpoint, dataset = state.ready()
        self.heartbeat.update(phase="qualification")
        replay = trial_config(
            self.spec, endpoint.served_model_name, virtual=endpoint.virtual
        ).replay
        context_preflight(endpoint, dataset, replay)
        # The model's reference ships with the runner's code; a twin has no weights to compare.
        reference = (
            None if endpoint.virtual else load_reference(self.spec.model.slug, simulated=False)
        )
        state.checks = qualify(endpoint, dataset, reference=reference)
        state.task_problems = self._task_problems(reference)
        if state.task_problems:
            self.heartbeat.update(phase="task check (idle)")
            state.checks.append(task_check(endpoint, state.task_problems, phase="idle"))
        state.info = runner_info(endpoint, dataset)
        self.reporter.qualification(qualification_report(state.checks, state.info))
        failed = fatal_failures(state.checks)
        if failed:
            raise RunFailure(
                "qualification failed: " + "; ".join(f"{c['name']}: {c['summary']}" for c in failed)
            )
        self.heartbeat.check()

    def _prepare_search(self, state: RunState) -> None:
        endpoint, _ = state.ready()
        self.sampler.start()
        self._start_engine_metrics(endpoint)
        state.tiers = self.spec.engine_tiers()
        state.base = trial_config(self.spec, endpoint.served_model_name, virtual=endpoint.virtual)
        state.sharding = sharding_for(
            self.spec, endpoint, self.reporter, state.tiers, self.work_dir
        )
        state.simulator = state.launcher.kind == "simulated"

    def _search(self, state: RunState) -> None:
        endpoint, dataset = state.ready()
        search = self.spec.search
        state.result = search_job(
            target=target_of(endpoint),
            trajectories=dataset.trajectories,
            tiers=state.tiers,
            base=state.trial_base(),
            cap=search.cap,
            prior_trials=state.prior,
            on_trial=functools.partial(self._on_trial, state),
            on_trial_result=functools.partial(self._on_trial_result, state),
            progress=functools.partial(self._progress, state),
            max_trials=search.max_trials,
            on_window=functools.partial(self._on_window, state),
            sharding=state.sharding,
            on_attempt_failed=self._on_attempt_failed,
        )
        self.sampler.stop()
        if self.engine_metrics is not None:
            self.engine_metrics.stop()

    def _check_tasks_under_load(self, state: RunState) -> None:
        if not state.task_problems:
            return
        endpoint, dataset = state.ready()
        self.heartbeat.update(phase="task check (under load)")
        load = (dataset, state.trial_base(), state.tiers, state.search_result())
        state.checks.append(
            task_check(endpoint, state.task_problems, phase="under_load", load=load)
        )
        info = state.info if state.info is not None else runner_info(endpoint, dataset)
        self.reporter.qualification(qualification_report(state.checks, info))

    def _search_open_loop(self, state: RunState) -> None:
        if self.spec.search.arrival != ARRIVAL_OPEN:
            return
        endpoint, dataset = state.ready()
        state.open_loop = self._open_loop(
            endpoint, dataset, state.trial_base(), state.tiers, state.sharding
        )

    def _complete(self, state: RunState) -> None:
        """Release the deployment, then report the search, the host and the logs."""
        endpoint, _ = state.ready()
        result = state.search_result()
        state.launcher.check()
        self.heartbeat.update(phase="completing")
        summary = contract.SearchSummary.of(result, state.open_loop)
        self._release(state.launcher)
        logs = self._upload_log(state.launcher)
        inventory = self.sampler.inventory()
        if endpoint.virtual:
            inventory = {
                "measured": False,
                "reason": "not measured: simulated on virtual time",
                "accelerators": [],
            }
        elif self.inventory is not None:
            inventory["inventory"] = self.inventory
        completion = contract.CompletionReport(
            search_summary=summary,
            telemetry=contract.HostInventory.model_validate(inventory),
            logs=logs,
            runner_info=runner_info(endpoint),
        )
        self.reporter.complete(completion)
        state.outcome = {
            "status": "completed",
            "trials": len(result.trials),
            "max_agents": summary.max_agents,
            "run_status": "done",
        }

    # --- the search's callbacks ------------------------------------------------------------

    def _on_attempt_failed(self, index: int, attempt: int, reason: str) -> None:
        log.warning(
            "run %s trial %s attempt %s failed: %s", self.spec.run_id, index, attempt, reason
        )
        self.heartbeat.update(
            last_failed_attempt={"trial": index, "attempt": attempt, "reason": reason[:500]}
        )

    def _progress(self, state: RunState, phase: str, index: int, concurrency: int) -> None:
        """Before each trial: the run is still wanted, the deployment still up (a launcher
        that watches it, as Slurm's, fails the run naming what ended: docs/pipeline.md
        "Slurm"), and the heartbeat says which trial comes."""
        self.heartbeat.check()
        state.launcher.check()
        state.current_index = index
        self.heartbeat.update(
            phase="search",
            search_phase=phase,
            trial=index + 1,
            max_trials=self.spec.search.max_trials,
            concurrency=concurrency,
        )

    def _on_window(
        self, state: RunState, index: int, mark: str, t_ns: int, transport: Transport
    ) -> None:
        """/metrics at the window's start and end, for counter deltas (never blocks)."""
        slot = state.scrapes.setdefault(index, {})
        if isinstance(transport, CountersInProcess):  # the simulator in process, on virtual time
            slot[mark] = parse_metrics(transport.metrics_text())
            return
        endpoint, _ = state.ready()
        if not endpoint.base_url:
            return

        def scrape() -> None:
            try:
                slot[mark] = scrape_counters(endpoint)
            except Exception as exc:  # a server without /metrics: "not measured"
                slot[f"{mark}_error"] = f"{type(exc).__name__}: {exc}"[:300]

        thread = threading.Thread(target=scrape, name=f"metrics-{index}-{mark}", daemon=True)
        state.threads.setdefault(index, []).append(thread)
        thread.start()

    def _on_trial_result(self, state: RunState, result: TrialResult) -> None:
        """A trial's raw records uploaded, with its telemetry and scrapes kept for its report."""
        index = state.current_index
        for thread in state.threads.pop(index, []):
            thread.join(timeout=15)
        blob, count = records_blob(result)
        stored = state.uploaded[index] = self._upload(
            "raw_records", blob, trial_index=index, count=count
        )
        s = result.summary
        telemetry = stored["telemetry"] = self.sampler.window(
            s.window_start_ns, s.window_end_ns, virtual=result.simulated
        )
        scraped = state.scrapes.pop(index, None)
        if scraped:
            telemetry["server_metrics"] = scraped
        if self.engine_metrics is not None:
            series = self.engine_metrics.window(s.window_start_ns, s.window_end_ns)
            if series is not None:
                telemetry["engine_metrics"] = series

    def _on_trial(self, state: RunState, trial: SearchTrial) -> None:
        """The trial as the search judged it, reported with what its result stored."""
        stored = state.uploaded.pop(trial.index)
        telemetry = stored.pop("telemetry")
        report = trial_report(trial, stored, telemetry, simulator=state.simulator)
        self.reporter.trial(report)
        self.heartbeat.update(
            trials_done=trial.index + 1,
            last_verdicts={k: bool(v) for k, v in trial.verdicts.items()},
            last_trial={
                "index": trial.index,
                "concurrency": trial.concurrency,
                "p25_output_speed": report.metrics.p25_output_speed,
                "error_rate": report.metrics.error_rate,
            },
        )
