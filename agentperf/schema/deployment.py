"""The deployment-config schema (docs/api.md "The config, in short"): what a vendor
submits, strictly checked.

Every object rejects unknown fields, and every error carries the dotted path of the field
to fix (``topology.roles.1.tp``). Parse untrusted text with :func:`parse_config`; it
enforces the size limit, reads YAML with the platform's one reader (``agentperf.schema.yaml12``:
the YAML 1.2 core schema; no anchors, tags, complex or duplicate keys) or JSON
(``agentperf.schema.loading``), and raises :class:`ConfigError` with
``fields: {path: [msg]}``.

The config's sections are declared here, but for its building blocks (the strict base,
field types, secrets by name: ``agentperf.schema.fields``) and its ``launcher`` section
(``agentperf.schema.launchers``).

A config is public once its result is published. Secrets never live in it: the only way to
pass a credential is by name, ``{secret: NAME}`` as an argument, a command item or an
environment value; the runner host supplies the value of its own variable NAME
(docs/security.md "Secrets in configs"). ``{secret: NAME}`` is stored in the long form the
runner reads: ``{secret: true, name: NAME}`` for an argument, ``{secret: true}`` for an
environment value (whose NAME is its variable's).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import (
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from agentperf.fielderrors import validation_fields
from agentperf.schema.fields import (
    GitCommit,
    ImageRef,
    IsoDate,
    LongText,
    ModelName,
    Revision,
    SecretArg,
    SecretEnv,
    ShortText,
    Slug,
    Strict,
    field_error,
)
from agentperf.schema.launchers import LAUNCHED_KINDS, Launcher, simulator_profile_targets
from agentperf.schema.loading import DEFAULT_MAX_CONFIG_BYTES, ConfigError, load_document
from agentperf.schema.secret_names import SECRET_NAME_SEGMENTS
from agentperf.schema.secrets import clear_secrets, hide_credential_keys
from agentperf.simulator.profile import ProfileError, load_profile_with
from agentperf.verification.speculative import fake_acceptance_findings

# What callers import from the schema (agentperf/schema/__init__.py, the web side, the CLI):
# the config and its validation (the document reader is agentperf.schema.loading).
__all__ = [
    "SCHEMA_VERSION", "DeploymentConfig", "config_json_schema", "parse_config", "validate_config",
]  # fmt: skip

SCHEMA_VERSION: Final = 1
SCHEMA_ID = "https://agentperf.example/schemas/deployment-config/v1.json"

WEIGHT_PRECISIONS = (
    "fp32",
    "bf16",
    "fp16",
    "fp8",
    "fp6",
    "fp4",
    "nvfp4",
    "mxfp4",
    "int8",
    "int4",
    "gguf_f32",
    "gguf_f16",
    "gguf_q8_0",
    "gguf_q4_k_m",
    "gguf_q4_0",
)
KV_DTYPES = ("fp32", "bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4", "int8", "q8_0", "q4_0")
ENGINES = ("vllm", "sglang", "trtllm", "dynamo", "llamacpp", "other")
# Engines whose builds are not shipped as container images (a pinned pip/wheel version instead).
IMAGE_OPTIONAL_ENGINES = ("llamacpp",)


class ModelSpec(Strict):
    id: Slug = Field(description="Catalog slug of the served model, e.g. deepseek-v4.1-flash-max.")
    revision: Revision | None = Field(
        default=None,
        description="Weights revision (Hugging Face commit, tag or file digest): one word of "
        "letters, digits and . _ / + -, or sha256:<hex>.",
    )
    weight_precision: Literal[WEIGHT_PRECISIONS]  # type: ignore[valid-type]
    kv_cache_dtype: Literal[KV_DTYPES]  # type: ignore[valid-type]


class Patch(Strict):
    ref: ShortText = Field(description="What was applied: a PR/commit URL or a patch file name.")
    reason: ShortText = Field(description="Why the stock engine was not enough.")


class Engine(Strict):
    name: Literal[ENGINES]  # type: ignore[valid-type]
    version: ShortText
    commit: GitCommit | None = None
    image: ImageRef | None = Field(
        default=None,
        description="Container image pinned by digest: name@sha256:<64 hex>. Required except "
        "for llama.cpp and simulated deployments.",
    )
    patches: list[Patch] = Field(default_factory=list, max_length=50)

    @field_validator("image", mode="before")
    @classmethod
    def _pinned(cls, value: Any) -> Any:
        if isinstance(value, str) and "@sha256:" not in value:
            raise ValueError(
                "not pinned by digest: write name@sha256:<64 hex> (a tag names whatever the "
                "registry holds today, so the runner never pulls one)"
            )
        return value


class Role(Strict):
    name: Literal["prefill", "decode", "both"]
    workers: int = Field(ge=1, le=100_000, description="Engine instances of this role.")
    accelerators_per_worker: int = Field(ge=1, le=4096)
    tp: int = Field(default=1, ge=1, le=4096, description="Tensor parallel size.")
    pp: int = Field(default=1, ge=1, le=512, description="Pipeline parallel size.")
    ep: int = Field(default=1, ge=1, le=4096, description="Expert parallel size.")
    dp: int = Field(
        default=1,
        ge=1,
        le=4096,
        description="Data-parallel ranks inside one worker (e.g. DP attention): either each "
        "rank has its own tp x pp accelerators, or the ranks share them (dp divides tp).",
    )
    hardware: Slug = Field(description="Catalog slug of the hardware system.")

    @model_validator(mode="after")
    def _parallelism_fits(self) -> Role:
        apw = self.accelerators_per_worker
        shard = self.tp * self.pp
        # dp ranks either each own tp x pp accelerators, or share them (DP attention: dp | tp)
        if shard * self.dp != apw and not (shard == apw and self.tp % self.dp == 0):
            extra = f" (x dp {self.dp} = {shard * self.dp})" if self.dp > 1 else ""
            raise field_error(
                "tp",
                f"tp {self.tp} x pp {self.pp} = {shard}{extra} does not match "
                f"accelerators_per_worker {apw}",
            )
        if self.ep > apw or apw % self.ep:
            raise field_error("ep", f"ep {self.ep} must divide accelerators_per_worker {apw}")
        return self

    @property
    def accelerators(self) -> int:
        return self.workers * self.accelerators_per_worker


class Topology(Strict):
    mode: Literal["aggregated", "disaggregated"]
    roles: list[Role] = Field(min_length=1, max_length=16)
    accelerators_used: int | None = Field(
        default=None,
        ge=1,
        description="Accelerators serving (prefill + decode roles). Derived from the roles; "
        "a stated figure must match.",
    )
    accelerators_in_system: int | None = Field(
        default=None, ge=1, description="Accelerators in the system(s) booked, used or not."
    )

    @model_validator(mode="after")
    def _roles_fit_mode(self) -> Topology:
        names = [r.name for r in self.roles]
        if self.mode == "aggregated":
            if names != ["both"]:
                raise field_error("roles", "aggregated mode takes exactly one role named 'both'")
        else:
            for i, name in enumerate(names):
                if name == "both":
                    raise field_error(
                        f"roles.{i}.name", "disaggregated roles are 'prefill' or 'decode'"
                    )
            for needed in ("prefill", "decode"):
                if needed not in names:
                    raise field_error("roles", f"disaggregated mode needs a '{needed}' role")
        first = self.roles[0].hardware
        for i, role in enumerate(self.roles[1:], start=1):
            if role.hardware != first:
                raise field_error(
                    f"roles.{i}.hardware",
                    f"every role must run on the same hardware system (roles.0 uses {first!r})",
                )
        derived = sum(r.accelerators for r in self.roles)
        if self.accelerators_used is not None and self.accelerators_used != derived:
            raise field_error(
                "accelerators_used",
                f"stated {self.accelerators_used}, but the roles use {derived} "
                "(sum of workers x accelerators_per_worker)",
            )
        self.accelerators_used = derived
        if self.accelerators_in_system is not None and self.accelerators_in_system < derived:
            raise field_error(
                "accelerators_in_system",
                f"{self.accelerators_in_system} is fewer than the {derived} accelerators used",
            )
        return self

    @property
    def hardware(self) -> str:
        return self.roles[0].hardware


class Speculative(Strict):
    method: Literal["eagle", "eagle3", "mtp", "ngram", "draft_model", "medusa", "other"]
    draft_model: ShortText | None = Field(
        default=None, description="Draft model (repo or catalog slug); required for draft_model."
    )
    draft_tokens: int = Field(ge=1, le=64, description="Tokens drafted per step.")

    @model_validator(mode="after")
    def _draft_model_named(self) -> Speculative:
        if self.method in ("draft_model", "eagle", "eagle3", "medusa") and not self.draft_model:
            raise field_error("draft_model", f"required for method {self.method!r}")
        return self


class Kernels(Strict):
    attention: ShortText | None = Field(default=None, description="e.g. flashinfer, fa3.")
    moe: ShortText | None = Field(default=None, description="e.g. deepep, cutlass, triton.")


class KvCache(Strict):
    transfer: Literal["none", "nixl", "mooncake", "nccl", "ucx", "lmcache", "other"] = "none"
    offload: Literal["none", "cpu", "disk", "lmcache", "other"] = "none"
    offload_gb: float | None = Field(default=None, gt=0)
    prefix_caching: bool = True

    @model_validator(mode="after")
    def _offload_sized(self) -> KvCache:
        if self.offload == "none" and self.offload_gb is not None:
            raise field_error("offload_gb", "set only when offload is not 'none'")
        return self


class Clocks(Strict):
    gpu_clock_mhz: int | None = Field(default=None, ge=1, description="Locked graphics clock.")
    memory_clock_mhz: int | None = Field(default=None, ge=1, description="Locked memory clock.")
    power_cap_w: int | None = Field(default=None, ge=1, description="Per-accelerator power cap.")


class Launch(Strict):
    """How the engine is started: the one launch description. A `container` or `process`
    launcher runs exactly this (the image's entrypoint is `command`, then `args`), and a
    result publishes it; for an `attached` endpoint it documents a start the runner does
    not perform.

    ``${VAR}`` in args is replaced from the config's `env`, `PORT` and the pool host's
    `RUNNER_LAUNCH_VARS`; no shell is involved."""

    command: ShortText = Field(
        description="The executable (the container's entrypoint), without arguments when a "
        "launcher runs it. Public once published: a credential goes in args as "
        "{secret: NAME}, never here."
    )
    args: list[Annotated[str, StringConstraints(max_length=2000)] | SecretArg] = Field(
        default_factory=list,
        max_length=500,
        description="Arguments; a credential is {secret: NAME}, never a clear value.",
    )
    port: int | None = Field(
        default=None,
        ge=1024,
        le=65535,
        description="Port the server listens on (127.0.0.1); required when a launcher runs it.",
    )
    served_model_name: ModelName | None = Field(
        default=None,
        description="The model id the server answers to; required when a launcher runs it.",
    )
    ready_timeout_s: int = Field(
        default=600, ge=1, le=7200, description="How long the server may take to answer."
    )


class Availability(Strict):
    status: Literal["available", "preview", "rdi"] = Field(
        description="available: buyable today; preview: announced, limited access; "
        "rdi: research/development/internal."
    )
    date: IsoDate | None = Field(
        default=None, description="Since when (available) or expected date (preview, rdi)."
    )

    @model_validator(mode="after")
    def _dated(self) -> Availability:
        if self.status in ("preview", "rdi") and self.date is None:
            raise field_error("date", f"required when status is {self.status!r}")
        return self


class BenchmarkOptions(Strict):
    """The few knobs a vendor may set; none changes what is measured."""

    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="Stop the search here (e.g. the deployment's admission limit).",
    )
    arrival: Literal["closed", "open"] | None = Field(
        default=None,
        description="open: also run the open-loop search (sessions arriving as a Poisson "
        "process, the highest rate per tier) beside the closed loop over the same dataset "
        "(docs/engine.md 'Arrival modes'); closed or absent: the closed loop only.",
    )


class DeploymentConfig(Strict):
    """A deployment to benchmark: the model, the engine, how it is laid out, how to reach it."""

    model_config = ConfigDict(
        extra="forbid",
        validate_default=True,
        strict=True,
        title="AgentPerf deployment config",
        json_schema_extra={"$id": SCHEMA_ID},
    )

    schema_version: Literal[1] = SCHEMA_VERSION
    model: ModelSpec
    engine: Engine
    topology: Topology
    speculative: Speculative | None = None
    kernels: Kernels | None = None
    kv_cache: KvCache = Field(default_factory=KvCache)
    cuda_graph: Literal["off", "piecewise", "full", "full_and_piecewise", "engine_default"] = (
        "engine_default"
    )
    clocks: Clocks | None = None
    launch: Launch | None = None
    env: SecretEnv = Field(
        default_factory=dict,
        max_length=200,
        description="Engine environment. The config is public: a credential is given by "
        "name, {secret: NAME} under the variable NAME; a name ending in a credential word ("
        + ", ".join(sorted(SECRET_NAME_SEGMENTS))
        + ") with a clear value is refused.",
    )
    availability: Availability
    launcher: Launcher
    benchmark: BenchmarkOptions = Field(default_factory=BenchmarkOptions)
    notes: LongText = ""

    @model_validator(mode="after")
    def _cross_checks(self) -> DeploymentConfig:
        if self.launcher.slurm is not None:
            _slurm_fits(self)
        if (
            self.engine.image is None
            and self.engine.name not in IMAGE_OPTIONAL_ENGINES
            and self.launcher.simulated is None
        ):
            raise field_error(
                "engine.image",
                f"required for engine {self.engine.name!r}: an image pinned by digest, "
                "name@sha256:<64 hex>",
            )
        if self.launcher.kind in LAUNCHED_KINDS:
            _launch_runnable(self)
        if self.launcher.simulated is not None:
            system, model = simulator_profile_targets(self.launcher.simulated.profile)
            if system is not None and system != self.hardware:
                raise field_error(
                    "launcher.simulated.profile",
                    f"profile simulates hardware {system!r}, the topology names {self.hardware!r}",
                )
            if model is not None and model != self.model.id:
                raise field_error(
                    "launcher.simulated.profile",
                    f"profile simulates model {model!r}, the config names {self.model.id!r}",
                )
            _twin_serves_the_topology(self)
        if self.topology.mode == "disaggregated" and self.kv_cache.transfer == "none":
            raise field_error("kv_cache.transfer", "disaggregated mode needs a KV transfer")
        _no_platform_variables(self)
        _no_fake_acceptance(self)
        return self

    @property
    def hardware(self) -> str:
        """Catalog slug of the hardware system every role runs on."""
        return self.topology.hardware

    @property
    def accelerators_used(self) -> int:
        assert self.topology.accelerators_used is not None  # set by the topology validator
        return self.topology.accelerators_used

    @property
    def is_simulated(self) -> bool:
        return self.launcher.simulated is not None

    @property
    def served_model_name(self) -> str | None:
        """The model id the runner asks for: the attached endpoint's, or `launch`'s."""
        if self.launcher.attached is not None:
            return self.launcher.attached.served_model_name
        if self.launcher.slurm is not None:
            return self.launcher.slurm.served_model_name
        return self.launch.served_model_name if self.launch is not None else None


def _slurm_fits(config: DeploymentConfig) -> None:
    slurm = config.launcher.slurm
    assert slurm is not None
    names = [r.name for r in config.topology.roles]
    for role in slurm.role_args:
        if role not in names:
            raise field_error(
                f"launcher.slurm.role_args.{role}", f"the topology has no {role!r} role"
            )
    if slurm.frontend is None and config.topology.mode == "disaggregated":
        raise field_error(
            "launcher.slurm.frontend",
            "a disaggregated topology needs a declared frontend (the pool's router balances "
            "one serving role)",
        )


def _twin_serves_the_topology(config: DeploymentConfig) -> None:
    """Overrides that change the twin's GPUs (replicas × accelerators of its roles) change
    them to the topology's: results are per accelerator, so `aggregated.accelerators: 7`
    under a topology of 8 would divide seven GPUs' output by eight. (A profile's own size is
    not checked against the topology here: the tiny test profiles stand for larger ones.)"""
    simulated = config.launcher.simulated
    assert simulated is not None
    if not simulated.overrides:
        return
    try:
        used = load_profile_with(simulated.profile, simulated.overrides).accelerators_used
        base = load_profile_with(simulated.profile).accelerators_used
    except ProfileError:
        return  # the overrides' own check names the field
    if used != base and used != config.accelerators_used:
        raise field_error(
            "launcher.simulated.overrides",
            f"the patched deployment serves on {used} accelerators (replicas × accelerators "
            f"of each role), the topology on {config.accelerators_used}: they must agree",
        )


def _launch_runnable(config: DeploymentConfig) -> None:
    """A launcher that starts `launch` needs it whole: one executable, a port, a model id;
    the container launcher also needs the image."""
    kind = config.launcher.kind
    if config.launch is None:
        raise field_error("launch", f"required by launcher.{kind}: the command it runs")
    if any(ch.isspace() for ch in config.launch.command):
        raise field_error(
            "launch.command",
            f"launcher.{kind} runs one executable with no shell: put its arguments in launch.args",
        )
    for name in ("port", "served_model_name"):
        if getattr(config.launch, name) is None:
            raise field_error(f"launch.{name}", f"required by launcher.{kind}")
    if kind == "container" and config.engine.image is None:
        raise field_error(
            "engine.image",
            "required by launcher.container: the image it pulls and runs, pinned by digest "
            "(registry/name@sha256:<64 hex>)",
        )


# `${NAME}` in a launched command (runner/launchers/process.py, slurm_task.py)
_COMMAND_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# The platform's and the pool host's own settings: never given to a vendor's command, so a
# config naming one is refused at submission, not after a reviewer approved its launch
# (docs/security.md "Vendor commands").
PLATFORM_VARIABLES = frozenset(
    {
        "SECRET_KEY",
        "FIELD_ENCRYPTION_KEY",
        "DATABASE_URL",
        "CACHE_REDIS_URL",
        "CELERY_BROKER_URL",
        "CELERY_RESULT_BACKEND",
    }
)
PLATFORM_VARIABLE_PREFIXES = ("RUNNER_", "AWS_", "S3_", "RECEIPT_", "DJANGO_")


def _no_platform_variables(config: DeploymentConfig) -> None:
    """A launched command may name its declared env, its task's variables and the pool's
    shared ones (RUNNER_LAUNCH_VARS, checked at launch); the platform's own never."""
    dumped = config.model_dump(mode="json", include={"launch", "launcher"})
    places: list[tuple[str, Any]] = [("launch", dumped.get("launch"))]
    slurm = (dumped.get("launcher") or {}).get("slurm")
    if slurm:
        places.append(("launcher.slurm", slurm))

    def walk(path: str, value: Any) -> None:
        if isinstance(value, str):
            for name in _COMMAND_VARIABLE.findall(value):
                if name in PLATFORM_VARIABLES or name.startswith(PLATFORM_VARIABLE_PREFIXES):
                    raise field_error(
                        path,
                        f"${{{name}}} is the platform's own setting, never given to a launched "
                        "command: a command may name its declared env, ${PORT} (and on Slurm "
                        "its task's variables) and the pool's shared variables",
                    )
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(f"{path}.{key}", item)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(f"{path}.{index}", item)

    for path, value in places:
        walk(path, value)


def _no_fake_acceptance(config: DeploymentConfig) -> None:
    """Refuse settings that accept draft tokens unverified (docs/verification.md)."""
    findings = fake_acceptance_findings(config.model_dump(mode="json", exclude={"notes"}))
    if findings:
        first = findings[0]
        raise field_error(
            first["path"],
            f"fakes speculative acceptance ({first['setting']}): a benchmarked engine must "
            "verify every draft token",
        )


# --- validating a parsed document ------------------------------------------------------


def errors_by_path(exc: ValidationError) -> dict[str, list[str]]:
    """Pydantic errors as the field map (agentperf.fielderrors: a cross-field check's
    ``config_field`` error at its own path, with its own message)."""
    return validation_fields(exc)


def validate_config(data: dict[str, Any]) -> DeploymentConfig:
    """Validate already-parsed data; ConfigError with field paths when it does not fit.

    Every string goes through the one secret detector (`agentperf.schema.secrets`) first;
    its findings and the schema's errors are reported together."""
    fields = clear_secrets(data)
    try:
        config = DeploymentConfig.model_validate(data)
    except ValidationError as exc:
        for path, messages in errors_by_path(exc).items():
            # a key that is itself a credential is not repeated in an error path
            fields.setdefault(hide_credential_keys(path), []).extend(messages)
        config = None
    if fields or config is None:
        raise ConfigError(
            f"the config has {sum(len(v) for v in fields.values())} error(s)",
            code="invalid_config",
            fields=fields,
        )
    return config


def parse_config(
    text: str | bytes, content_type: str = "", *, limit: int = DEFAULT_MAX_CONFIG_BYTES
) -> DeploymentConfig:
    """Parse and validate an untrusted config document (JSON or YAML) of at most `limit`
    bytes."""
    return validate_config(load_document(text, content_type, limit=limit))


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema of DeploymentConfig, as served and written to docs/."""
    schema = DeploymentConfig.model_json_schema(mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
