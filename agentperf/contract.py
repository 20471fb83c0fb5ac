"""The one typed contract between the web tier and the pool hosts (docs/pipeline.md
"The contract").

Every document that crosses the runner API, and every document the web tier stores from
it, is one of these models:

- :class:`RunSpec` — the task message dispatch builds and the pool worker reads
  (docs/pipeline.md "The run spec"); stored without ``api`` and ``dataset``.
- :class:`StartReport`, :class:`Heartbeat` (its :class:`Progress`),
  :class:`QualificationReport`, :class:`TrialReport`, :class:`CompletionReport`,
  :class:`FailureReport`, :class:`UploadRequest`, :class:`ShardReport` — what the worker
  posts (docs/pipeline.md "Runner API").
- :class:`TierVerdict`, :class:`TrialMetrics`, :class:`TrialTelemetry`,
  :class:`SearchSummary`, :class:`HostInventory`, :class:`RunnerInfo` — the parts the web
  tier stores on ``Trial`` and ``BenchmarkRun`` rows and every reader reads back through
  :func:`trial_verdicts`, :func:`trial_metrics`, ``Model.model_validate``.

The worker builds them, the runner API validates them at the boundary (a 400 naming the
field path on any mismatch: :func:`error_fields`) and the web tier stores
:meth:`Contract.dump` — the JSON the worker sent, key for key. The config is strict:
unknown fields are refused (``extra="forbid"``) and nothing is coerced (``"2"`` is not an
integer, ``1`` not a boolean); an integer is accepted where a float is expected.

DB-free and web-free: this module imports pydantic and the engine, never Django.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import PydanticUndefined

from agentperf.engine.cachetruth import CacheCounters as EngineCacheCounters
from agentperf.engine.cachetruth import CacheTruth as EngineCacheTruth
from agentperf.engine.metrics import ClientHealth as EngineClientHealth
from agentperf.engine.metrics import TrialSummary
from agentperf.engine.search import Phase, SearchResult
from agentperf.engine.search import TierResult as EngineTierResult
from agentperf.engine.trial import Tier as EngineTier
from agentperf.engine.trial import TierVerdict as EngineTierVerdict
from agentperf.fielderrors import validation_fields
from agentperf.inventory import Inventory
from agentperf.verification.status import Status

SPEC_VERSION = 1

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Count = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(ge=1)]
SearchPhase = Phase  # the engine's (agentperf/engine/search.py)


class Contract(BaseModel):
    """Strict: unknown fields refused, no coercion (docs/pipeline.md "The contract")."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True)

    def dump(self) -> dict[str, Any]:
        """The JSON document stored and sent: the fields that were given, as given (a
        default the writer did not set is not written)."""
        return self.model_dump(mode="json", exclude_unset=True)


# --- the run spec (dispatch → worker) ---------------------------------------------------


class SimulatedLauncher(Contract):
    kind: Literal["simulated"]
    profile: str
    seed: int
    clock: Literal["real", "virtual"]
    served_model_name: str
    profile_label: str
    accelerators_used: Positive
    accelerators_total: Positive
    # a JSON Merge Patch of the profile's deployment section (docs/simulator.md "Overrides")
    overrides: dict[str, Any] | None = None


class AttachedLauncher(Contract):
    kind: Literal["attached"]
    endpoint_id: str
    url: str
    api_key_env: str
    served_model_name: str


class SecretArg(Contract):
    """A command argument the runner host fills from its environment variable ``name``."""

    secret: Literal[True]
    name: str


class SecretRef(Contract):
    """An environment value the runner host supplies (docs/security.md "Vendor commands")."""

    secret: Literal[True]


class ProcessLauncher(Contract):
    kind: Literal["process"]
    command: list[str | SecretArg] = Field(min_length=1)
    env: dict[str, str | SecretRef]
    port: Annotated[int, Field(ge=1, le=65535)]
    ready_timeout_s: Positive
    served_model_name: str


class ContainerLauncher(Contract):
    """The config's `launch` run in `engine.image` with Podman (runner/launchers/container.py)."""

    kind: Literal["container"]
    image: str
    command: list[str | SecretArg] = Field(min_length=1)
    env: dict[str, str | SecretRef]
    port: Annotated[int, Field(ge=1, le=65535)]
    ready_timeout_s: Positive
    served_model_name: str


class SlurmTask(Contract):
    """One command of a Slurm launch (runner/launchers/slurm.py); secrets by name."""

    command: list[str | SecretArg] = Field(min_length=1)
    env: dict[str, str | SecretRef]


class SlurmRole(SlurmTask):
    name: Literal["prefill", "decode", "both"]
    workers: Positive
    accelerators_per_worker: Positive


class SlurmLauncher(Contract):
    """The topology as one heterogeneous Slurm job (docs/pipeline.md "Slurm")."""

    kind: Literal["slurm"]
    image: str | None
    roles: list[SlurmRole] = Field(min_length=1)
    frontend: SlurmTask | None = None  # None: the pool's router
    ready_path: str
    ready_timeout_s: Positive
    time_limit_s: Positive
    accelerators_used: Positive
    served_model_name: str


Launcher = Annotated[
    SimulatedLauncher | AttachedLauncher | ProcessLauncher | SlurmLauncher | ContainerLauncher,
    Field(discriminator="kind"),
]


class ModelRef(Contract):
    slug: str
    served_model_name: str


class TierSetRef(Contract):
    slug: str
    version: int


class Tier(Contract, EngineTier):
    """An SLO tier: the engine's own model (agentperf.engine.trial.Tier, docs/engine.md),
    under the contract's rules (its defaults kept: a tier set need not state them)."""

    model_config = Contract.model_config

    def engine(self) -> EngineTier:
        return EngineTier(**self.model_dump())


class Accelerators(Contract):
    used: Positive
    total: Positive | None
    # a launched server's engine workers, each one's accelerators_per_worker (the worker
    # grants exactly these: runner/launchers/devices.py); None: one group of `used`
    per_worker: list[Positive] | None = Field(default=None, max_length=1024)


class SearchOptions(Contract):
    """``RUN_SEARCH_OPTIONS``, the pool's overrides, the vendor's cap (docs/pipeline.md
    "Dispatch")."""

    warmup_s: float
    duration_s: float
    cap: Positive
    max_trials: Positive
    min_requests: Positive
    tool_delay_scale: float
    request_timeout_s: float
    max_loop_lag_ms: float
    max_cpu_percent: float
    api: Literal["chat", "completions"] = "chat"  # agentperf.engine.transport.Api
    seed: int = 0
    ramp_s: float | None = None
    # primed prefix cache, on virtual time only (docs/engine.md "Primed cache")
    prime_cache: bool = False
    # HumanEval problems of the task check (docs/verification.md "quality_task")
    task_problems: Count = 0
    # the pool's host also runs other work: repeated trials' spread only warns
    shared_host: bool = False
    # load generation (docs/engine.md "Sharded trials")
    shards: Positive | Literal["auto"] = 1
    loadgen_hosts: list[str] = Field(default_factory=list)
    # arrival mode (docs/engine.md "Arrival modes"): "open" runs the open-loop search over
    # the same dataset after the closed one; its step and cap in sessions per minute (None:
    # the engine's default step, agentperf.engine.openloop.auto_rate_step)
    arrival: Literal["closed", "open"] = "closed"
    rate_step: float | None = Field(default=None, gt=0)
    rate_cap: float = Field(default=2048.0, gt=0)


class LoadGen(Contract):
    shards: Positive | Literal["auto"]
    hosts: list[str]
    queue: str | None


class Limits(Contract):
    soft_s: Positive
    hard_s: Positive


RUN_TOKEN_PREFIX = "aprun_"
TOKEN_KEY_ENV = "RUNNER_TOKEN_KEY"  # a pool host's key for deriving its runs' tokens


def run_token(key: str, run_id: int, seed: str) -> str:
    """The run token a pool host derives from the message's seed with its pool's key
    (docs/security.md "Run tokens and upload grants"): the web side keeps only its hash and
    the task message only the seed, so no broker, database or log holds the token."""
    mac = hmac.new(key.encode(), f"agentperf-run-token:{run_id}:{seed}".encode(), hashlib.sha256)
    return RUN_TOKEN_PREFIX + base64.urlsafe_b64encode(mac.digest()).rstrip(b"=").decode()


class ApiRef(Contract):
    """Message only, never stored: the runner API's base URL and the seed of the run's
    token (``run_token``); the token itself never travels in a message."""

    base_url: str
    seed: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{32,64}$")]


class UploadGrant(Contract):
    """An upload target from the runner API's ``uploads`` (docs/pipeline.md "Runner API"):
    one PUT of exactly ``size`` bytes before ``expires_at`` (Unix seconds); a PUT beyond
    either is refused."""

    url: str
    method: Literal["PUT"]
    headers: dict[str, str]
    size: Positive
    expires_at: Positive


class DatasetRef(Contract):
    """Message only, never stored: the private test set with a fresh presigned URL."""

    name: str
    version: str
    sha256: Sha256
    file_sha256: Sha256
    size: Count
    url: str


class RunSpec(Contract):
    """The run spec (docs/pipeline.md "The run spec"): everything the pool worker needs."""

    version: Literal[1]
    run_id: int
    submission_id: int
    pool: str
    launcher: Launcher
    model: ModelRef
    tier_set: TierSetRef
    tiers: list[Tier] = Field(min_length=1)
    accelerators: Accelerators
    search: SearchOptions
    loadgen: LoadGen
    heartbeat_interval_s: float
    telemetry_interval_s: float
    limits: Limits
    simulated: bool
    api: ApiRef | None = None
    dataset: DatasetRef | None = None

    def stored(self) -> dict[str, Any]:
        """What ``BenchmarkRun.run_spec`` keeps: no token, no presigned URL."""
        return {k: v for k, v in self.dump().items() if k not in ("api", "dataset")}

    def engine_tiers(self) -> list[EngineTier]:
        return [t.engine() for t in self.tiers]


# --- what the worker reports -------------------------------------------------------------


class Endpoint(Contract):
    """What the launcher says about the served endpoint (runner/launchers/ ``Endpoint.info``
    without its model list; docs/pipeline.md "The pool worker")."""

    launcher: Literal["attached", "container", "process", "simulated", "slurm"]
    endpoint_id: str | None = None  # attached
    profile: str | None = None  # simulated
    clock: Literal["real", "virtual"] | None = None  # simulated
    sandbox: str | None = None  # process (bubblewrap), container (podman)
    command: list[str] | None = None  # process, container: the executable only
    pid: int | None = None  # process, container
    ready_after_s: float | None = None  # process, container
    slurm: dict[str, Any] | None = None  # slurm: the job's layout (docs/pipeline.md "Slurm")
    image: str | None = None  # container: the image pulled and run, by digest
    pull_s: float | None = None  # container: time to pull the image


class ReplayedDataset(Contract):
    """What was really replayed: verification compares it with the recorded digest."""

    name: str
    version: str
    sha256: Sha256
    trajectories: Count


class RunnerInfo(Contract):
    """The worker about itself; merged over start, qualification and complete."""

    hostname: str
    pid: int
    python: str
    platform: str
    cpus: int | None
    endpoint: Endpoint | None = None
    dataset: ReplayedDataset | None = None


class StartReport(Contract):
    runner_info: RunnerInfo


class LastFailedAttempt(Contract):
    trial: Count
    attempt: Count
    reason: str


class LastTrial(Contract):
    index: Count
    concurrency: Positive
    p25_output_speed: float | None
    error_rate: float | None


WorkerPhase = Literal[
    "starting", "dataset", "launching", "qualification", "task check (idle)", "search",
    "task check (under load)", "open loop", "completing", "stopping",
]  # fmt: skip
# the web side's phases (runs/progress.py): verifying, then the run's final state
SettledPhase = Literal["verifying", "done", "failed", "cancelled"]


class Progress(Contract):
    """A run's progress as the worker beats it (docs/pipeline.md "The pool worker"); the
    web side settles it once the search is over (``phase`` verifying / done / failed /
    cancelled, ``search_phase`` finished or the final state, live fields dropped)."""

    phase: WorkerPhase | SettledPhase
    attempt: Positive | None = None
    trials_done: Count | None = None
    search_phase: SearchPhase | Literal["finished", "done", "failed", "cancelled"] | None = None
    trial: Positive | None = None
    max_trials: Positive | None = None
    concurrency: Positive | None = None
    last_verdicts: dict[str, bool] | None = None
    last_trial: LastTrial | None = None
    last_failed_attempt: LastFailedAttempt | None = None


class QueueEstimate(Contract):
    """A pending run's place on its queue (runs/progress.py), computed, never stored."""

    phase: Literal["queued"]
    queue: str
    queue_position: Positive
    runs_ahead: Count
    running_on_queue: Count
    estimated_start_s: int | None
    estimate_basis: str


class Heartbeat(Contract):
    progress: Progress


class Check(Contract):
    """A qualification probe (runner/verification/probes.py): its evidence as measured."""

    name: str
    status: Status
    summary: str
    fatal: bool
    evidence: dict[str, Any]


class QualificationReport(Contract):
    checks: list[Check]
    runner_info: RunnerInfo


class ArtifactRef(Contract):
    """An object the worker uploaded through an upload grant (docs/pipeline.md "Runner API")."""

    key: str
    sha256: Sha256
    size: Positive


ShardTrialId = Annotated[str, Field(pattern=r"^t\d{1,4}a\d{1,3}$")]  # t<index>a<attempt>
ShardIndex = Annotated[int, Field(ge=0, le=4095)]


class UploadRequest(Contract):
    """``POST uploads``: what the worker means to upload (docs/pipeline.md "Runner API"); the
    answer is the object's key and an :class:`UploadGrant` for exactly ``size`` bytes. A
    trial's raw records name the trial (``trial_index``), a load-generator shard's records
    its trial and shard (``trial_id``, ``shard``: docs/engine.md "Sharded trials")."""

    kind: Literal["raw_records", "log", "shard_records"]
    sha256: Sha256
    size: Positive
    trial_index: Count | None = None
    count: Count | None = None
    trial_id: ShardTrialId | None = None
    shard: ShardIndex | None = None


class ShardReport(Contract):
    """``POST shards``: a load-generator shard's report beside its uploaded records
    (docs/engine.md "Sharded trials"); ``report`` is the engine's shard report
    (agentperf/engine/sharding.py), read back by the coordinator."""

    trial_id: ShardTrialId
    shard: ShardIndex
    report: dict[str, Any]
    sha256: Sha256
    size: Positive


class RawRecordsRef(ArtifactRef):
    """A trial's raw request records (gzip JSONL) and how many there are."""

    count: Count


class Complete(Contract):
    """The contract's form of an engine model (agentperf/engine/): its fields, declared once in
    the engine, each required here (the engine's defaults are for building one, not for
    reading a document), under the contract's rules."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        for info in cls.model_fields.values():
            info.default = PydanticUndefined
            info.default_factory = None
        cls.model_rebuild(force=True)


class TierVerdict(Complete, EngineTierVerdict):
    """One tier's verdict on one trial: the engine's own model (agentperf/engine/trial.py,
    docs/engine.md), every field required; ``ttft_s`` is null in JSON when infinite."""

    model_config = Contract.model_config

    @classmethod
    def of(cls, verdict: EngineTierVerdict) -> TierVerdict:
        return cls.model_validate(verdict.to_dict())


class ClientHealth(Complete, EngineClientHealth):
    """The load generator's health over the window: the engine's own model
    (agentperf.engine.metrics.ClientHealth), every field required."""

    model_config = Contract.model_config


class CacheCounters(Complete, EngineCacheCounters):
    """The server's prefix-cache counters over a window against the requests' own cached
    counts: the engine's model (agentperf.engine.cachetruth), every field required."""

    model_config = Contract.model_config


class CacheTruth(Complete, EngineCacheTruth):
    """A trial's cache truth (agentperf.engine.cachetruth, docs/metrics.md "Cache truth"):
    the engine's model, every field required."""

    model_config = Contract.model_config

    counters: CacheCounters | None


class ModelledEnergy(Contract):
    """A simulated trial's modelled power (runner/telemetry/modelled.py, docs/simulator.md);
    never read for a measured result."""

    modelled: Literal[True]
    power_w: float
    power_w_per_accelerator: float
    idle_power_w_per_accelerator: float
    dynamic_energy_j: float
    accelerators: Positive
    window_s: float
    method: str


class SessionShare(Contract):
    """One tier's share of sessions that met it, with its session-bootstrap interval."""

    met: Count
    sessions: Count
    share: float | None  # None: no session in the window
    low: float | None
    high: float | None
    confidence: float


class WholeTaskTime(Contract):
    """Model time of whole trajectories (tool delays excluded), seconds: `sessions` ended,
    `censored` still running at the trial's end; median and p90 by Kaplan–Meier over both
    (None when too many were still running to tell; docs/metrics.md "Whole-task time")."""

    sessions: Count
    censored: Count = 0  # absent in trials recorded before censoring was counted
    median: float | None
    p90: float | None


class SessionMetrics(Contract):
    """A trial's session block (agentperf.engine.metrics.summarize_sessions)."""

    sessions: Count
    tiers: dict[str, SessionShare]
    whole_task_model_time_s: WholeTaskTime


class TrialMetrics(Contract, TrialSummary):
    """``Trial.metrics``: the engine's TrialSummary (agentperf/engine/metrics.py, where its
    fields are declared), strict, with the extra sections below: the trial's bootstrap
    statistics, a sharded trial's load generator (docs/engine.md "Sharded trials"), the
    measured window power and a simulated trial's modelled power."""

    model_config = Contract.model_config

    # As stored (JSON): an infinite percentile (failures) is null
    ttft_s: dict[str, float | None]  # type: ignore[assignment]
    client: ClientHealth
    # engine.stats: {"intervals", "min_requests", "marginal"} (docs/verification.md)
    statistics: dict[str, Any] | None = None
    load_generator: dict[str, Any] | None = None
    power_w: float | None = None  # measured over the window (TrialTelemetry.power_w)
    modelled_energy: ModelledEnergy | None = None
    # engine.metrics.summarize_sessions (docs/engine.md "Session SLOs"); None: a trial
    # stored before sessions were summarised
    sessions: SessionMetrics | None = None  # type: ignore[assignment]
    # engine.cachetruth (docs/metrics.md "Cache truth"), with the window's counters where
    # the worker scraped them; None: a trial stored before it was summarised
    cache_truth: CacheTruth | None = None

    @classmethod
    def of(cls, summary: TrialSummary, **extra: Any) -> TrialMetrics:
        """From the engine's own summary (and the extra sections, already JSON)."""
        return cls.model_validate({**summary.to_dict(), **extra})

    def interval(self, name: str) -> dict[str, Any] | None:
        """The bootstrap interval of statistic ``name`` (engine.stats Interval.to_dict())."""
        found = ((self.statistics or {}).get("intervals") or {}).get(name)
        return found if isinstance(found, dict) else None


class ServerMetrics(Contract):
    """The server's /metrics at the window's start and end (counters the worker keeps), or
    why a scrape failed (docs/verification.md)."""

    start: dict[str, float] | None = None
    end: dict[str, float] | None = None
    start_error: str | None = None
    end_error: str | None = None


class EngineMetrics(Contract):
    """The serving engine's own gauges and counters over a trial window, scraped from its
    /metrics through the run (docs/pipeline.md "Engine metrics"): each series is (seconds
    from the window's start, value); counters are cumulative from the server's start."""

    source: str = Field(max_length=100)
    # a floor rather than gt=0: OpenAPI 3.0's exclusiveMinimum is a flag, not a number
    interval_s: float = Field(ge=0.1, le=3600)
    counters: list[str] = Field(default_factory=list, max_length=20)
    series: dict[str, list[Annotated[list[float], Field(min_length=2, max_length=2)]]] = Field(
        max_length=20
    )
    failed_scrapes: Count = 0


class TrialTelemetry(Contract):
    """``Trial.telemetry``: power and energy measured on the runner host over the window
    (runner/telemetry/power.py window_energy), or ``{"measured": false, "reason"}``; the
    server's /metrics scrapes ride along (docs/pipeline.md "The contract")."""

    measured: bool
    reason: str | None = None
    tool: str | None = None
    method: str | None = None
    denominator: str | None = None
    accelerators: Count | None = None
    accelerators_on_host: Count | None = None
    accelerators_used: list[dict[str, Any]] | None = None
    utilization_pct: float | None = None
    power_w: float | None = None
    energy_j: float | None = None
    coverage: float | None = None
    max_gap_s: float | None = None
    samples: Count | None = None
    per_accelerator: list[dict[str, Any]] | None = None
    cross_check: dict[str, float] | None = None
    server_metrics: ServerMetrics | None = None
    engine_metrics: EngineMetrics | None = None


class TrialReport(Contract):
    """``POST trials``: one finished trial (docs/pipeline.md "Runner API")."""

    index: Count
    concurrency: Positive
    phase: SearchPhase
    metrics: TrialMetrics
    verdicts: dict[str, TierVerdict] = Field(min_length=1)
    telemetry: TrialTelemetry
    raw_records: RawRecordsRef


class TierResult(Complete, EngineTierResult):
    """One tier's search result: the engine's own model (agentperf.engine.search.TierResult),
    under the contract's rules."""

    model_config = Contract.model_config


class SummaryTrial(Contract):
    """A trial as the search saw it, without its data (stored on the Trial row)."""

    index: Count
    concurrency: Positive
    phase: SearchPhase
    verdicts: dict[str, bool]
    marginal: list[str]


class OpenLoopTier(Contract):
    """One tier of the open-loop search (agentperf.engine.openloop.open_loop_summary)."""

    max_rate_per_min: float  # 0: even the first rate failed
    lowest_fail_rate_per_min: float | None
    confirmed: bool
    converged: bool
    flags: list[str]
    # concurrent sessions the trials at the max rate produced (None: no passing rate)
    mean_concurrent_sessions: float | None
    peak_concurrent_sessions: Count | None
    ttft_s: dict[str, float | None]  # TTFT percentiles at the max rate ("p50".."p99")


class OpenLoopSummary(Contract):
    """``SearchSummary.open_loop``: the open-loop search run beside the closed one over the
    same dataset (docs/engine.md "Arrival modes")."""

    mode: Literal["open"]
    rate_step_per_min: float
    rate_cap_per_min: float
    flags: list[str]
    trials: Count
    tiers: dict[str, OpenLoopTier]


class SearchSummary(Contract):
    """``BenchmarkRun.search_summary``: SearchResult.to_dict() without each trial's data
    (docs/engine.md), and the open-loop search's summary when the run had one."""

    cap: Positive
    flags: list[str]
    max_agents: dict[str, int]
    tiers: dict[str, TierResult]
    trials: list[SummaryTrial]
    open_loop: OpenLoopSummary | None = None

    @classmethod
    def of(cls, result: SearchResult, open_loop: dict[str, Any] | None = None) -> SearchSummary:
        doc = result.to_dict()
        doc["trials"] = [{k: v for k, v in t.items() if k != "data"} for t in doc["trials"]]
        if open_loop is not None:
            doc["open_loop"] = open_loop
        return cls.model_validate(doc)


class AcceleratorInfo(Contract):
    index: Count
    name: str
    uuid: str | None
    memory_total_mib: float | None
    memory_used_mib: float | None
    energy_counter: bool


class HostInventory(Contract):
    """``BenchmarkRun.telemetry``: the runner host's accelerators (runner/telemetry/
    sampler.py inventory), or why they were not measured."""

    measured: bool
    reason: str | None = None
    tool: str | None = None
    accelerators: list[AcceleratorInfo]
    # What served the run, checked against the config (agentperf/inventory.py; absent from
    # runners that do not collect it yet: docs/verification.md "inventory")
    inventory: Inventory | None = None


class CompletionReport(Contract):
    """``POST complete`` (docs/pipeline.md "Runner API")."""

    search_summary: SearchSummary
    telemetry: HostInventory
    logs: list[ArtifactRef]
    runner_info: RunnerInfo


class FailureReport(Contract):
    reason: str = Field(min_length=1, max_length=5000)
    logs: list[ArtifactRef] = Field(default_factory=list)


# --- reading stored documents -----------------------------------------------------------

_VERDICTS: TypeAdapter[dict[str, TierVerdict]] = TypeAdapter(dict[str, TierVerdict])


def trial_verdicts(stored: Any) -> dict[str, TierVerdict]:
    """``Trial.verdicts`` read back through the contract (raises on any other shape)."""
    return _VERDICTS.validate_python(stored)


def trial_metrics(stored: Any) -> TrialMetrics:
    """``Trial.metrics`` read back through the contract (raises on any other shape)."""
    return TrialMetrics.model_validate(stored)


def search_summary(stored: Any) -> SearchSummary | None:
    """``BenchmarkRun.search_summary`` read back through the contract; None for a run that
    has not completed (``{}``)."""
    return SearchSummary.model_validate(stored) if stored else None


def error_fields(exc: ValidationError) -> dict[str, list[str]]:
    """A validation error as the API's field map: ``{"metrics.p25_output_speed": [msg]}``
    (agentperf.fielderrors, the one convention)."""
    return validation_fields(exc)
