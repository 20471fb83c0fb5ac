"""A trial's settings and what it reports (docs/pipeline.md "The contract"): every trial's
`TrialConfig` from the run spec, the run's load generation (`sharding_for`), the engine's
target for the endpoint, the deployment's /metrics counters, and the `TrialReport` of a
finished trial with its raw records and telemetry."""

from __future__ import annotations

import os
from typing import Any, Protocol, runtime_checkable

from agentperf import contract
from agentperf.engine import rawrecords
from agentperf.engine.cachetruth import CacheTruth, with_counters
from agentperf.engine.jobs import Target
from agentperf.engine.replay import ReplayConfig
from agentperf.engine.search import SearchTrial
from agentperf.engine.sharding import LocalShards, ShardExecutor, Sharding
from agentperf.engine.trial import Tier, TrialConfig, TrialResult
from agentperf.verification.speculative import GAUGES, parse_metrics, scrape_metrics
from runner.launchers import Endpoint
from runner.telemetry.modelled import modelled_power
from runner.worker.datasets import dataset_file
from runner.worker.failures import RunFailure
from runner.worker.loadgen_hosts import CeleryShards
from runner.worker.reporter import Reporter


@runtime_checkable
class CountersInProcess(Protocol):
    """A transport that holds the served system's /metrics itself (the simulator in
    process, on virtual time): its counters are read, not scraped."""

    def metrics_text(self) -> str: ...


def records_blob(result: TrialResult) -> tuple[bytes, int]:
    """Raw request records as the stored object (agentperf.engine.rawrecords) and their
    count."""
    return rawrecords.encode(result.records)


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
    dataset = dataset_ref(spec)
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


def dataset_ref(spec: contract.RunSpec) -> contract.DatasetRef:
    """The message's dataset section (a stored spec has none; a task message always does)."""
    if spec.dataset is None:
        raise RunFailure("the run spec carries no dataset section")
    return spec.dataset


def target_of(endpoint: Endpoint) -> Target:
    if endpoint.virtual:
        return Target(sim_profile=endpoint.sim_profile, seed=endpoint.seed)
    return Target(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key,
        seed=endpoint.seed,
        connect=endpoint.connect,
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
