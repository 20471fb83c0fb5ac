"""The orchestration of one benchmark run: launcher → probes → search → completion
(docs/pipeline.md "The director seam").

`RunDirector(spec, reporter).run()` runs the steps of one attempt and sends every document
through a `Reporter` (runner/worker/reporter.py): the pool worker's `ApiReporter` (the
runner API with the run's token, uploads through presigned grants: runner/worker/execute.py),
or a `MemoryReporter` in process (the verification harness, the director's tests). It never
touches the database. A redelivered or retried run starts the same way; the reporter's
`start` returns the trials already stored, and the search resumes after them
(`run_search(prior_trials=...)`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import gzip
import hashlib
import logging
import os
import platform
import socket
import tempfile
import threading
from typing import Any

from pydantic import ValidationError

from agentperf import contract
from agentperf.engine import rawrecords
from agentperf.engine.cachetruth import CacheTruth, with_counters
from agentperf.engine.jobs import Target, run_on_target, search_job
from agentperf.engine.openloop import (
    auto_rate_step,
    open_loop_summary,
    steps_for,
)
from agentperf.engine.preflight import check_context, http_fetch
from agentperf.engine.replay import ARRIVAL_OPEN, ReplayConfig
from agentperf.engine.search import SearchResult, SearchTrial
from agentperf.engine.sharding import LocalShards, ShardExecutor, Sharding
from agentperf.engine.trajectory import Dataset
from agentperf.engine.transport import Clock, Transport
from agentperf.engine.trial import Tier, TrialConfig, TrialResult, run_trial
from agentperf.verification.fingerprint import load_reference
from agentperf.verification.speculative import GAUGES, parse_metrics, scrape_metrics
from agentperf.verification.status import WARN
from agentperf.verification.taskcheck import collect_completions, load_problems
from runner.launchers import Endpoint, LauncherError, launcher_for
from runner.launchers.base import LAUNCHES_SERVER, Launcher
from runner.launchers.devices import DeviceGrant, DevicePool
from runner.telemetry import TelemetrySampler
from runner.telemetry.engine_metrics import EngineMetricsSampler
from runner.telemetry.modelled import modelled_power
from runner.verification.probes import (
    check,
    distribution_probe,
    extended_probes,
    fatal_failures,
    model_listed_check,
    run_probes,
)
from runner.verification.taskrun import score
from runner.worker.api_client import RunnerApiError, RunSuperseded
from runner.worker.datasets import DatasetMismatch, dataset_file
from runner.worker.host_inventory import collect_inventory
from runner.worker.loadgen_hosts import CeleryShards
from runner.worker.reporter import Reporter

log = logging.getLogger(__name__)


class RunCancelled(Exception):
    """The web side said stop (the submission was withdrawn or the run cancelled)."""


class RunFailure(Exception):
    """A failure that retrying will not fix (bad config, failed qualification, bad data)."""


def records_blob(result: TrialResult) -> tuple[bytes, int]:
    """Raw request records as the stored object (agentperf.engine.rawrecords) and their
    count."""
    return rawrecords.encode(result.records)


class Heartbeat:
    """Reports the shared progress every `interval_s` from a thread, so a long trial still
    beats; remembers a cancel request from the web side."""

    def __init__(self, reporter: Reporter, interval_s: float) -> None:
        self.reporter = reporter
        self.interval_s = interval_s
        self.progress: dict[str, Any] = {}
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
            contract.Progress.model_validate(merged)  # a wrong field fails here, not later
            self.progress = merged
        self.beat()

    def beat(self) -> None:
        with self._lock:
            document = contract.Heartbeat(progress=contract.Progress.model_validate(self.progress))
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


def trial_config(spec: contract.RunSpec, model: str, *, virtual: bool = False) -> TrialConfig:
    """Every trial's settings but concurrency. ``prime_cache`` in the search options applies
    only on virtual time (the simulator in process), the one transport that can prime."""
    search = spec.search
    return TrialConfig(
        concurrency=1,
        warmup_s=search.warmup_s,
        duration_s=search.duration_s,
        accelerators=spec.accelerators.used,
        accelerators_total=spec.accelerators.total,
        min_requests=search.min_requests,
        max_loop_lag_ms=search.max_loop_lag_ms,
        max_cpu_percent=search.max_cpu_percent,
        replay=ReplayConfig(
            model=model,
            api=search.api,
            seed=search.seed,
            tool_delay_scale=search.tool_delay_scale,
            ramp_s=search.warmup_s if search.ramp_s is None else search.ramp_s,
            timeout_s=search.request_timeout_s,
            # unique per run; the search adds the trial index (fresh namespaces per trial)
            namespace_salt=f"run{spec.run_id}.",
            prime_cache=virtual and search.prime_cache,
        ),
    )


def sharding_for(
    spec: contract.RunSpec,
    endpoint: Endpoint,
    reporter: Reporter,
    tiers: list[Tier],
    work_dir: str,
) -> Sharding | None:
    """The run's load generation (spec ``loadgen``): None for one process; local shard
    processes; or shards on the pool's load-generator hosts (docs/engine.md "Sharded
    trials")."""
    section = spec.loadgen
    shards = None if section.shards == "auto" else section.shards
    if shards == 1:
        return None
    if endpoint.virtual:
        raise RunFailure("sharded load generation needs a real-time endpoint, not virtual time")
    if endpoint.connect is not None or not endpoint.base_url:
        raise RunFailure(
            "sharded load generation needs an endpoint reachable over the network; this "
            "launched server is reachable only from the worker's sandbox network"
        )
    dataset = _dataset(spec)
    dataset_path = dataset_file(dataset.file_sha256)
    queue = section.queue
    api = reporter.runner_api() if queue else None
    if queue and api is None:
        raise RunFailure("load-generator hosts report to the runner API; this run has none")
    sync_host = os.environ.get("AGENTPERF_LOADGEN_SYNC_HOST", "127.0.0.1")
    cpus = os.cpu_count() or 1

    def executor() -> ShardExecutor:
        if queue and api is not None:
            return CeleryShards(
                api=api,
                run_id=spec.run_id,
                queue=queue,
                dataset=dataset.dump(),
                api_key=endpoint.api_key,
                work_dir=work_dir,
            )
        return LocalShards(dataset_path=dataset_path, api_key=endpoint.api_key, work_dir=work_dir)

    ceiling = None
    if shards is None:
        from agentperf.engine.shard_cli import calibrate, read_ceiling

        ceiling = read_ceiling() or float(calibrate(write=True)["events_per_core_s"])
    hosts = len(section.hosts) or 1
    return Sharding(
        executor=executor,
        shards=shards,
        fastest_speed=max((t.min_p25_output_speed for t in tiers), default=0.0),
        ceiling_events_per_core_s=ceiling,
        max_shards=cpus * hosts if shards is None else None,
        sync_host=sync_host,
    )


def _dataset(spec: contract.RunSpec) -> contract.DatasetRef:
    """The message's dataset section (a stored spec has none; a task message always does)."""
    if spec.dataset is None:
        raise RunFailure("the run spec carries no dataset section")
    return spec.dataset


def _target(endpoint: Endpoint) -> Target:
    if endpoint.virtual:
        return Target(sim_profile=endpoint.sim_profile, seed=endpoint.seed)
    return Target(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key,
        seed=endpoint.seed,
        connect=endpoint.connect,
    )


def context_preflight(endpoint: Endpoint, dataset: Dataset, replay: ReplayConfig) -> None:
    """Fail the run, before any load, when a turn of the dataset cannot fit the server's
    context, naming the turns (docs/engine.md "Context pre-flight"). A platform run has no
    opt-out: its qualification's context_fits probe fails such a run anyway, on its longest
    prompt alone. On virtual time there is no server to ask."""
    if endpoint.virtual or not endpoint.base_url:
        return
    fetch = http_fetch(endpoint.base_url, api_key=endpoint.api_key, connect=endpoint.connect)
    checked = check_context(dataset.trajectories, replay, fetch, base_url=endpoint.base_url)
    if not checked.fits:
        raise RunFailure(
            "context pre-flight: "
            + checked.refusal("the dataset or the deployment's context must change")
        )
    log.info("%s", checked.line())


def qualify(
    endpoint: Endpoint, dataset: Dataset | None = None, *, reference: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    models = None if endpoint.virtual else endpoint.info.get("models")
    checks = [model_listed_check(endpoint.served_model_name, models)]

    async def main(transport: Transport, clock: Clock) -> list[dict[str, Any]]:
        model = endpoint.served_model_name
        basic = await run_probes(transport, clock, model=model)
        extended = await extended_probes(
            transport,
            clock,
            model=model,
            dataset=dataset,
            max_model_len=endpoint.info.get("max_model_len"),
        )
        if reference and reference.get("distributions"):
            extended.append(
                await distribution_probe(transport, clock, model=model, reference=reference)
            )
        return basic + extended

    if checks[0]["status"] != "fail":
        checks += run_on_target(_target(endpoint), main)
    return checks


def task_check(
    endpoint: Endpoint, problems: list[dict[str, Any]], *, phase: str, load: Any = None
) -> dict[str, Any]:
    """HumanEval through the deployment, executed in the sandbox: idle, or while the
    search's highest passing concurrency is replayed (docs/verification.md "quality_task")."""
    model = endpoint.served_model_name
    concurrency = None
    load_note = ""
    if load is not None:
        dataset, base, tiers, result = load
        passing = [t.concurrency for t in result.trials if any(t.verdicts.values())]
        measured = [t.concurrency for t in result.trials]
        if not measured:
            return check(
                f"task_{phase}",
                WARN,
                "the search ran no trial: nothing to load",
                fatal=False,
                evidence={},
            )
        # no tier passed (a slow host): the lowest measured load still busies the server
        concurrency = max(passing) if passing else min(measured)
        load_note = "" if passing else " (no concurrency passed a tier: the lowest measured)"
        config = dataclasses.replace(base, concurrency=concurrency, duration_s=24 * 3600.0)

    async def main(transport: Transport, clock: Clock) -> list[dict[str, Any]]:
        if load is None:
            return await collect_completions(
                transport, clock, model=model, problems=problems, tag=phase
            )
        running = asyncio.ensure_future(
            run_trial(transport, clock, dataset.trajectories, config, tiers)
        )
        try:
            await clock.sleep(min(float(config.warmup_s), 30.0))  # the load is up first
            return await collect_completions(
                transport, clock, model=model, problems=problems, tag=phase
            )
        finally:
            running.cancel()
            with contextlib.suppress(BaseException):
                await running

    completions = run_on_target(_target(endpoint), main)
    scored = score(problems, completions)
    if concurrency is not None:
        scored["concurrency"] = concurrency
    where = (
        f" with {concurrency} agents loading the deployment{load_note}"
        if concurrency
        else " (idle)"
    )
    return check(
        f"task_{phase}",
        "pass",
        f"HumanEval pass@1 {scored['passed']}/{scored['problems']}{where}",
        fatal=False,
        evidence=scored,
    )


def runner_info(
    endpoint: Endpoint | None = None, dataset: Dataset | None = None
) -> contract.RunnerInfo:
    """The worker about itself; with the endpoint (its model list left out) and what was
    really replayed (verification compares it with the recorded digest)."""
    info = contract.RunnerInfo(
        hostname=socket.gethostname(),
        pid=os.getpid(),
        python=platform.python_version(),
        platform=platform.platform(),
        cpus=os.cpu_count(),
    )
    if endpoint is not None:
        info.endpoint = contract.Endpoint.model_validate(
            {k: v for k, v in endpoint.info.items() if k not in ("models", "runtime")}
        )
    if dataset is not None:
        info.dataset = contract.ReplayedDataset(
            name=dataset.name,
            version=dataset.version,
            sha256=dataset.digest(),
            trajectories=len(dataset.trajectories),
        )
    return info


def qualification_report(
    checks: list[dict[str, Any]], info: contract.RunnerInfo
) -> contract.QualificationReport:
    return contract.QualificationReport(
        checks=[contract.Check.model_validate(c) for c in checks], runner_info=info
    )


def scrape_counters(endpoint: Endpoint) -> dict[str, float]:
    """The deployment's /metrics counters now: base_url's own, or the sum over
    `endpoint.metrics_urls` when a router stands in front of several servers (each counts
    only the requests it served). One server that does not answer fails the whole scrape:
    a partial sum would read as fewer hits (docs/metrics.md "Cache truth")."""
    urls = endpoint.metrics_urls or (str(endpoint.base_url),)
    total: dict[str, float] = {}
    for url in urls:
        text = scrape_metrics(url, api_key=endpoint.api_key, connect=endpoint.connect)
        for name, value in parse_metrics(text).items():
            total[name] = total.get(name, 0.0) + value
    for name in GAUGES & total.keys():
        total[name] /= len(urls)
    return total


def trial_report(
    trial: SearchTrial,
    raw_records: dict[str, Any],
    telemetry: dict[str, Any],
    *,
    simulator: bool = False,
) -> contract.TrialReport:
    """``POST trials`` for one finished trial (docs/pipeline.md "The contract"): the
    engine's summary and verdicts (``trial.data`` is TrialResult.to_dict()), its bootstrap
    statistics and load generator, the window's measured power, and on the simulator its
    own modelled power (labelled, never read as measured)."""
    data = trial.data
    summary = data["summary"]
    if summary.get("cache_truth") is not None:
        # the window's counter deltas judged beside the requests' own cached counts
        # (docs/metrics.md "Cache truth")
        scraped = telemetry.get("server_metrics") or {}
        truth = with_counters(
            CacheTruth.model_validate(summary["cache_truth"]),
            scraped.get("start"),
            scraped.get("end"),
        )
        summary = {**summary, "cache_truth": truth.to_dict()}
    extra: dict[str, Any] = {}
    if data.get("statistics"):
        extra["statistics"] = data["statistics"]
    if data.get("load_generator"):
        extra["load_generator"] = data["load_generator"]
    if telemetry.get("measured"):
        extra["power_w"] = telemetry["power_w"]
    if simulator:
        modelled = modelled_power(telemetry.get("server_metrics"), summary.get("window_s"))
        if modelled is not None:
            extra["modelled_energy"] = modelled
    return contract.TrialReport(
        index=trial.index,
        concurrency=trial.concurrency,
        phase=trial.phase,
        metrics=contract.TrialMetrics.model_validate({**summary, **extra}),
        verdicts={k: contract.TierVerdict.model_validate(v) for k, v in data["verdicts"].items()},
        telemetry=contract.TrialTelemetry.model_validate(telemetry),
        raw_records=contract.RawRecordsRef(
            key=raw_records["key"],
            sha256=raw_records["sha256"],
            size=raw_records["size"],
            count=raw_records["count"],
        ),
    )


def parse_spec(spec: dict[str, Any] | contract.RunSpec) -> contract.RunSpec:
    """The run spec read through the contract; a RunFailure names the fields that do not
    fit."""
    if isinstance(spec, contract.RunSpec):
        return spec
    try:
        return contract.RunSpec.model_validate(spec)
    except ValidationError as exc:
        raise RunFailure(
            f"the run spec does not fit the contract: {contract.error_fields(exc)}"
        ) from None


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
        spec: dict[str, Any] | contract.RunSpec,
        reporter: Reporter,
        *,
        work_dir: str | None = None,
        launcher: Launcher | None = None,
    ) -> None:
        self.spec = parse_spec(spec)
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
        accelerators = self.spec.accelerators.model_dump()
        per_worker = list(accelerators.get("per_worker") or [int(accelerators["used"])])
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
            self.spec.launcher.dump(), log_dir=self.work_dir, run_id=self.spec.run_id
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
            target=_target(endpoint),
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
        state.dataset = self.reporter.dataset(_dataset(self.spec))

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
            target=_target(endpoint),
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
        metrics_text = getattr(transport, "metrics_text", None)
        if metrics_text is not None:  # the simulator in process, on virtual time
            slot[mark] = parse_metrics(metrics_text())
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
