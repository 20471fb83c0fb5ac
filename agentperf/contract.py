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

This module is the one import place of the contract: the run spec and the worker's
reports are declared here; the documents they carry are declared by meaning in
``agentperf/documents/`` (a trial's metrics, statistics and telemetry; a sharded trial's
shard reports and load generator; the search summary; the endpoint) and exported here.

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

from pydantic import Field, JsonValue, ValidationError

from agentperf.documents.endpoint import (
    Endpoint,
    SlurmLayout,
    SlurmNode,
    SlurmRoleLayout,
    SlurmTaskState,
)
from agentperf.documents.rules import Contract, Count, Positive, Sha256
from agentperf.documents.search import (
    OpenLoopSummary,
    OpenLoopTier,
    SearchPhase,
    SearchSummary,
    SummaryTrial,
    TierResult,
    search_summary,
)
from agentperf.documents.shards import (
    LoadGenerator,
    ShardHealth,
    ShardIndex,
    ShardRow,
    ShardRunReport,
)
from agentperf.documents.trial import (
    AcceleratorEnergy,
    AcceleratorIdentity,
    CacheCounters,
    CacheTruth,
    ClientHealth,
    EngineMetrics,
    MinRequests,
    ModelledEnergy,
    ServerMetrics,
    SessionMetrics,
    SessionShare,
    StatInterval,
    TierVerdict,
    TrialMetrics,
    TrialStatistics,
    TrialTelemetry,
    WholeTaskTime,
    trial_metrics,
    trial_verdicts,
)
from agentperf.engine.trial import Tier as EngineTier
from agentperf.fielderrors import validation_fields
from agentperf.inventory import Inventory
from agentperf.verification.status import Status

# The documents declared in agentperf/documents/, exported from the contract's one place.
__all__ = [
    "AcceleratorEnergy", "AcceleratorIdentity", "CacheCounters", "CacheTruth",
    "ClientHealth", "Contract", "Endpoint", "EngineMetrics", "LoadGenerator",
    "MinRequests", "ModelledEnergy", "OpenLoopSummary", "OpenLoopTier", "SearchSummary",
    "ServerMetrics", "SessionMetrics", "SessionShare", "ShardHealth", "ShardRow",
    "ShardRunReport", "SlurmLayout", "SlurmNode", "SlurmRoleLayout", "SlurmTaskState",
    "StatInterval", "SummaryTrial", "TierResult", "TierVerdict", "TrialMetrics",
    "TrialStatistics", "TrialTelemetry", "WholeTaskTime", "search_summary", "trial_metrics",
    "trial_verdicts",
]  # fmt: skip

SPEC_VERSION = 1


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
    # a JSON Merge Patch of the profile's deployment section (docs/simulator.md "Overrides"):
    # any JSON object, applied as given
    overrides: dict[str, JsonValue] | None = None


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
    """A qualification probe (runner/verification/probes.py): its evidence as measured, a
    JSON object whose keys each probe names (docs/verification.md)."""

    name: str
    status: Status
    summary: str
    fatal: bool
    evidence: dict[str, JsonValue]


class QualificationReport(Contract):
    checks: list[Check]
    runner_info: RunnerInfo


class ArtifactRef(Contract):
    """An object the worker uploaded through an upload grant (docs/pipeline.md "Runner API")."""

    key: str
    sha256: Sha256
    size: Positive


ShardTrialId = Annotated[str, Field(pattern=r"^t\d{1,4}a\d{1,3}$")]  # t<index>a<attempt>


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
    report: ShardRunReport
    sha256: Sha256
    size: Positive


class RawRecordsRef(ArtifactRef):
    """A trial's raw request records (gzip JSONL) and how many there are."""

    count: Count


class TrialReport(Contract):
    """``POST trials``: one finished trial (docs/pipeline.md "Runner API")."""

    index: Count
    concurrency: Positive
    phase: SearchPhase
    metrics: TrialMetrics
    verdicts: dict[str, TierVerdict] = Field(min_length=1)
    telemetry: TrialTelemetry
    raw_records: RawRecordsRef


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


# --- validation errors -------------------------------------------------------------------


def error_fields(exc: ValidationError) -> dict[str, list[str]]:
    """A validation error as the API's field map: ``{"metrics.p25_output_speed": [msg]}``
    (agentperf.fielderrors, the one convention)."""
    return validation_fields(exc)
