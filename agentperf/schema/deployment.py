"""The deployment-config schema (docs/api.md "The config, in short"): what a vendor
submits, strictly checked.

Every object rejects unknown fields, and every error carries the dotted path of the field
to fix (``topology.roles.1.tp``). Parse untrusted text with :func:`parse_config`; it
enforces the size limit, reads YAML with the platform's one reader (``agentperf.schema.yaml12``: the
YAML 1.2 core schema; no anchors, tags, complex or duplicate keys) or JSON, and raises
:class:`ConfigError` with ``fields: {path: [msg]}``.

A config is public once its result is published. Secrets never live in it: the only way to
pass a credential is by name, ``{secret: NAME}`` as an argument, a command item or an
environment value; the runner host supplies the value of its own variable NAME
(docs/security.md "Secrets in configs"). ``{secret: NAME}`` is stored in the long form the
runner reads: ``{secret: true, name: NAME}`` for an argument, ``{secret: true}`` for an
environment value (whose NAME is its variable's).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Annotated, Any, Final, Literal, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agentperf.fielderrors import CROSS_FIELD, NON_FIELD, validation_fields
from agentperf.schema.secrets import (
    SECRET_NAME_SEGMENTS,
    clear_secrets,
    hide_credential_keys,
)
from agentperf.simulator.profile import (
    PROFILES_DIR,
    ProfileError,
    available_profiles,
    load_profile_with,
)
from agentperf.verification.speculative import fake_acceptance_findings

SCHEMA_VERSION: Final = 1
SCHEMA_ID = "https://agentperf.example/schemas/deployment-config/v1.json"

Slug = Annotated[
    str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]*$", min_length=1, max_length=100)
]
ShortText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
LongText = Annotated[str, StringConstraints(max_length=5000)]
# registry host[:port], then path components as the OCI distribution spec writes them (no
# empty, `.` or `..` component: a reference is a name, never a path), pinned by digest
ImageRef = Annotated[
    str,
    StringConstraints(
        pattern=r"^[a-z0-9]+(?:[.-][a-z0-9]+)*(?::[0-9]+)?"
        r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)+@sha256:[0-9a-f]{64}$",
        max_length=300,
    ),
]
# a weights revision: a commit, a tag or branch, or a file digest; never free text (a
# credential written as `token: …` there was published)
Revision = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True,
        pattern=r"^(sha256:[0-9a-f]{64}|[A-Za-z0-9][A-Za-z0-9._/+-]{0,127})$",
        max_length=200,
    ),
]
# the model id a server answers to: it is written into a Slurm job script and request
# bodies, so one line with no control characters
ModelName = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True, pattern=r"^[^\x00-\x1f\x7f]+$", min_length=1, max_length=200
    ),
]
GitCommit = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{7,40}$")]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=100)]

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


def _field_error(path: str, message: str) -> PydanticCustomError:
    """An error whose location is `path` below the object that raises it."""
    return PydanticCustomError(CROSS_FIELD, "{message}", {"path": path, "message": message})


class _Strict(BaseModel):
    # strict types (docs/security.md "Input limits"): `true` is not an integer, `"2"` not a
    # number, 1 not a bool
    model_config = ConfigDict(extra="forbid", validate_default=True, strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_int_literals(cls, value: Any, info: ValidationInfo) -> Any:
        """Strict mode still lets Literal[1] take `true` and Literal[True] take 1 (1 == True
        in Python); a literal takes only its own type."""
        field = cls.model_fields.get(info.field_name or "")
        if field is None or get_origin(field.annotation) is not Literal:
            return value
        allowed = get_args(field.annotation)
        confused = isinstance(value, bool) != isinstance(allowed[0], bool)
        if confused and isinstance(value, int) and value in allowed:
            raise ValueError(f"must be {' or '.join(json.dumps(a) for a in allowed)}")
        return value


def _iso_date(value: Any) -> Any:
    """JSON has no date type: an ISO `YYYY-MM-DD` string is the date (YAML gives a date)."""
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value) if len(value) == 10 else value
        except ValueError:
            return value  # the strict date check names the field
    return value


IsoDate = Annotated[dt.date, BeforeValidator(_iso_date)]


_ENV_NAME_SCHEMA = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "maxLength": 100}


def _secret_name_schema(schema: dict[str, Any], *, argument: bool) -> None:
    """The JSON Schema says what the validators accept: ``{secret: NAME}`` or the long form."""
    schema["properties"]["secret"] = {
        "anyOf": [{"const": True}, _ENV_NAME_SCHEMA],
        "description": "NAME, the runner host's environment variable (or true: the long form).",
    }
    if argument:
        schema["required"] = ["secret"]
        schema["if"] = {"properties": {"secret": {"const": True}}}
        schema["then"] = {"required": ["name"]}
        schema["else"] = {"not": {"required": ["name"]}}


class SecretRef(_Strict):
    """An environment value given by name: ``{secret: NAME}`` under the variable NAME (or the
    long form ``{secret: true}``); the runner host supplies its own variable's value."""

    model_config = ConfigDict(
        extra="forbid",
        validate_default=True,
        strict=True,
        json_schema_extra=lambda schema: _secret_name_schema(schema, argument=False),
    )

    secret: Literal[True] = Field(description="Always true: the value is not in the config.")


EnvValue = Annotated[str, StringConstraints(max_length=4000)] | SecretRef


# Variables that choose which accelerators a process or a container runtime's hook sees:
# the pool grants the devices (docs/security.md "Devices"), never the config. On a pool whose
# Podman uses the legacy nvidia hook, NVIDIA_VISIBLE_DEVICES=all would expose every GPU.
DEVICE_VARIABLES = frozenset(
    {
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "NVIDIA_MIG_CONFIG_DEVICES",
        "NVIDIA_MIG_MONITOR_DEVICES",
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "ZE_AFFINITY_MASK",
        "NEURON_RT_VISIBLE_CORES",
    }
)


def _secret_env(value: Any) -> Any:
    """``{VAR: {secret: VAR}}`` in the long form ``{VAR: {secret: true}}``; a different name
    is refused at ``env.VAR`` (the runner host reads a variable of the same name), and so is
    a variable that chooses devices (DEVICE_VARIABLES)."""
    if not isinstance(value, dict):
        return value
    out: dict[Any, Any] = {}
    for key, item in value.items():
        if isinstance(key, str) and key.upper() in DEVICE_VARIABLES:
            raise _field_error(
                key,
                "chooses the accelerators a process sees: the pool grants exactly the "
                "config's accelerators per worker, and no config may widen or move that",
            )
        if isinstance(item, dict) and isinstance(item.get("secret"), str) and len(item) == 1:
            if item["secret"] != key:
                raise _field_error(
                    str(key),
                    f"an environment secret is read from the runner host's variable of the "
                    f"same name: write {{secret: {key}}} (got {{secret: {item['secret']}}})",
                )
            item = {"secret": True}
        out[key] = item
    return out


SecretEnv = Annotated[dict[EnvName, EnvValue], BeforeValidator(_secret_env)]


class SecretArg(_Strict):
    """A secret as a command argument, ``{secret: NAME}`` (or the long form ``{secret: true,
    name: NAME}``): the runner host puts the value of its environment variable NAME there;
    the config, the approval and every page hold only the name."""

    model_config = ConfigDict(
        extra="forbid",
        validate_default=True,
        strict=True,
        json_schema_extra=lambda schema: _secret_name_schema(schema, argument=True),
    )

    secret: Literal[True] = Field(description="Always true: the value is not in the config.")
    name: EnvName = Field(description="Environment variable on the runner host.")

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        if isinstance(value, dict) and isinstance(value.get("secret"), str) and len(value) == 1:
            return {"secret": True, "name": value["secret"]}
        return value


ArgText = Annotated[str, StringConstraints(min_length=1, max_length=4000)]


class ModelSpec(_Strict):
    id: Slug = Field(description="Catalog slug of the served model, e.g. deepseek-v4.1-flash-max.")
    revision: Revision | None = Field(
        default=None,
        description="Weights revision (Hugging Face commit, tag or file digest): one word of "
        "letters, digits and . _ / + -, or sha256:<hex>.",
    )
    weight_precision: Literal[WEIGHT_PRECISIONS]  # type: ignore[valid-type]
    kv_cache_dtype: Literal[KV_DTYPES]  # type: ignore[valid-type]


class Patch(_Strict):
    ref: ShortText = Field(description="What was applied: a PR/commit URL or a patch file name.")
    reason: ShortText = Field(description="Why the stock engine was not enough.")


class Engine(_Strict):
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


class Role(_Strict):
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
            raise _field_error(
                "tp",
                f"tp {self.tp} x pp {self.pp} = {shard}{extra} does not match "
                f"accelerators_per_worker {apw}",
            )
        if self.ep > apw or apw % self.ep:
            raise _field_error("ep", f"ep {self.ep} must divide accelerators_per_worker {apw}")
        return self

    @property
    def accelerators(self) -> int:
        return self.workers * self.accelerators_per_worker


class Topology(_Strict):
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
                raise _field_error("roles", "aggregated mode takes exactly one role named 'both'")
        else:
            for i, name in enumerate(names):
                if name == "both":
                    raise _field_error(
                        f"roles.{i}.name", "disaggregated roles are 'prefill' or 'decode'"
                    )
            for needed in ("prefill", "decode"):
                if needed not in names:
                    raise _field_error("roles", f"disaggregated mode needs a '{needed}' role")
        first = self.roles[0].hardware
        for i, role in enumerate(self.roles[1:], start=1):
            if role.hardware != first:
                raise _field_error(
                    f"roles.{i}.hardware",
                    f"every role must run on the same hardware system (roles.0 uses {first!r})",
                )
        derived = sum(r.accelerators for r in self.roles)
        if self.accelerators_used is not None and self.accelerators_used != derived:
            raise _field_error(
                "accelerators_used",
                f"stated {self.accelerators_used}, but the roles use {derived} "
                "(sum of workers x accelerators_per_worker)",
            )
        self.accelerators_used = derived
        if self.accelerators_in_system is not None and self.accelerators_in_system < derived:
            raise _field_error(
                "accelerators_in_system",
                f"{self.accelerators_in_system} is fewer than the {derived} accelerators used",
            )
        return self

    @property
    def hardware(self) -> str:
        return self.roles[0].hardware


class Speculative(_Strict):
    method: Literal["eagle", "eagle3", "mtp", "ngram", "draft_model", "medusa", "other"]
    draft_model: ShortText | None = Field(
        default=None, description="Draft model (repo or catalog slug); required for draft_model."
    )
    draft_tokens: int = Field(ge=1, le=64, description="Tokens drafted per step.")

    @model_validator(mode="after")
    def _draft_model_named(self) -> Speculative:
        if self.method in ("draft_model", "eagle", "eagle3", "medusa") and not self.draft_model:
            raise _field_error("draft_model", f"required for method {self.method!r}")
        return self


class Kernels(_Strict):
    attention: ShortText | None = Field(default=None, description="e.g. flashinfer, fa3.")
    moe: ShortText | None = Field(default=None, description="e.g. deepep, cutlass, triton.")


class KvCache(_Strict):
    transfer: Literal["none", "nixl", "mooncake", "nccl", "ucx", "lmcache", "other"] = "none"
    offload: Literal["none", "cpu", "disk", "lmcache", "other"] = "none"
    offload_gb: float | None = Field(default=None, gt=0)
    prefix_caching: bool = True

    @model_validator(mode="after")
    def _offload_sized(self) -> KvCache:
        if self.offload == "none" and self.offload_gb is not None:
            raise _field_error("offload_gb", "set only when offload is not 'none'")
        return self


class Clocks(_Strict):
    gpu_clock_mhz: int | None = Field(default=None, ge=1, description="Locked graphics clock.")
    memory_clock_mhz: int | None = Field(default=None, ge=1, description="Locked memory clock.")
    power_cap_w: int | None = Field(default=None, ge=1, description="Per-accelerator power cap.")


class Launch(_Strict):
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


class Availability(_Strict):
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
            raise _field_error("date", f"required when status is {self.status!r}")
        return self


class AttachedLauncher(_Strict):
    """An endpoint already running next to the hardware, named by its id in the pool's
    allowlist (never a free URL)."""

    endpoint_id: Slug
    served_model_name: ModelName


_MOVED = {
    "command": "launch.command and launch.args",
    "env": "env (the config's engine environment)",
    "port": "launch.port",
    "ready_timeout_s": "launch.ready_timeout_s",
    "served_model_name": "launch.served_model_name",
}


def _refuse_old_launch(value: Any) -> Any:
    """A config of the old shape (``launcher.process.command`` beside ``launch``) is refused
    at each moved field: there is one launch description (docs/api.md "The config, in
    short")."""
    if isinstance(value, dict):
        for key, where in _MOVED.items():
            if key in value:
                raise _field_error(
                    key,
                    f"moved to {where}: `launch` is the one launch description, what runs "
                    "is what a result publishes",
                )
    return value


class ContainerLauncher(_Strict):
    """Run `launch` in `engine.image`, pulled by digest from a registry the pool allows,
    with Podman (docs/security.md "Container launcher"). The default where the pool host
    has a container runtime."""

    @model_validator(mode="before")
    @classmethod
    def _one_launch(cls, value: Any) -> Any:
        return _refuse_old_launch(value)


class ProcessLauncher(_Strict):
    """Run `launch` on the pool host itself, in the bubblewrap sandbox, for hosts without a
    container runtime: the image is not run, and its results say so."""

    @model_validator(mode="before")
    @classmethod
    def _one_launch(cls, value: Any) -> Any:
        return _refuse_old_launch(value)


def simulator_profile_targets(profile: str) -> tuple[str | None, str | None]:
    """(system slug, model slug) a profile names from the catalog; None where it is inline."""
    for suffix in (".yaml", ".yml"):
        path = PROFILES_DIR / f"{profile}{suffix}"
        if path.is_file():
            doc = yaml.safe_load(path.read_text()) or {}
            system, model = doc.get("system"), doc.get("model")
            return (
                system if isinstance(system, str) else None,
                model if isinstance(model, str) else None,
            )
    return None, None


def available_simulator_profiles() -> list[str]:
    return list(available_profiles())


class SimulatedLauncher(_Strict):
    """The platform's simulated serving system; results are labelled simulated."""

    profile: Slug = Field(description="A profile in agentperf/simulator/profiles/ (file stem).")
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    overrides: dict[str, Any] | None = Field(
        default=None,
        description="A JSON Merge Patch (RFC 7396) of the profile's `deployment` section: a "
        'what-if on the twin (docs/simulator.md "Overrides"), e.g. '
        '{"speculative": {"k": 4}}. Every patched value is checked by the profile\'s rules.',
    )

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str) -> str:
        known = available_simulator_profiles()
        if value not in known:
            raise ValueError(f"unknown simulator profile; one of: {', '.join(known) or 'none'}")
        return value

    @model_validator(mode="after")
    def _overrides_fit(self) -> SimulatedLauncher:
        if not self.overrides:
            return self
        try:
            load_profile_with(self.profile, self.overrides)
        except ProfileError as exc:
            # "deployment.a.b: message" names the patched field
            where, sep, message = str(exc).partition(": ")
            if sep and (where == "deployment" or where.startswith("deployment.")):
                path = "overrides" + where[len("deployment") :]
                raise _field_error(path, message) from None
            raise _field_error("overrides", str(exc)) from None
        return self


LAUNCHER_KINDS = ("attached", "container", "process", "simulated", "slurm")
LAUNCHED_KINDS = ("container", "process")  # the runner starts `launch`


class SlurmFrontend(_Strict):
    """A frontend the config declares (a router or a disaggregation frontend): one task on
    its own node, serving the OpenAI API on ${PORT}."""

    command: list[ArgText | SecretArg] = Field(min_length=1, max_length=500)
    env: SecretEnv = Field(default_factory=dict, max_length=200)


class SlurmLauncher(_Strict):
    """The topology as one Slurm job on the pool's cluster (docs/pipeline.md "Slurm"): a
    heterogeneous job component per role (`workers` tasks of `accelerators_per_worker` GPUs),
    each task running `command` in `engine.image` through the pool's container runtime, and
    a frontend the runner measures: `frontend`, or the pool's router (nginx, round-robin over
    the serving role). ``${PORT}``, ``${HOST}``, ``${ROLE}``, ``${TASK_INDEX}``,
    ``${ROLE_<role>_HOSTS}`` (host:port of every task of a role) and
    ``${ROLE_<role>_NODES}`` are replaced per task; no shell is involved."""

    command: list[ArgText | SecretArg] = Field(
        min_length=1, max_length=500, description="What every worker task runs."
    )
    role_args: dict[Literal["prefill", "decode", "both"], list[ArgText | SecretArg]] = Field(
        default_factory=dict, description="Arguments appended to command for one role's tasks."
    )
    env: SecretEnv = Field(default_factory=dict, max_length=200)
    frontend: SlurmFrontend | None = Field(
        default=None,
        description="The frontend serving the OpenAI API; absent: the pool's router "
        "(aggregated topologies only).",
    )
    ready_path: Annotated[
        str, StringConstraints(pattern=r"^/[A-Za-z0-9/._-]*$", max_length=200)
    ] = Field(default="/health", description="A worker task is ready when this answers 2xx.")
    ready_timeout_s: int = Field(default=900, ge=1, le=7200)
    time_limit_min: int = Field(
        default=240, ge=1, le=10080, description="The job's time limit (sbatch --time)."
    )
    served_model_name: ModelName


def _slurm_fits(config: DeploymentConfig) -> None:
    slurm = config.launcher.slurm
    assert slurm is not None
    names = [r.name for r in config.topology.roles]
    for role in slurm.role_args:
        if role not in names:
            raise _field_error(
                f"launcher.slurm.role_args.{role}", f"the topology has no {role!r} role"
            )
    if slurm.frontend is None and config.topology.mode == "disaggregated":
        raise _field_error(
            "launcher.slurm.frontend",
            "a disaggregated topology needs a declared frontend (the pool's router balances "
            "one serving role)",
        )


class Launcher(_Strict):
    attached: AttachedLauncher | None = None
    container: ContainerLauncher | None = None
    process: ProcessLauncher | None = None
    simulated: SimulatedLauncher | None = None
    slurm: SlurmLauncher | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Launcher:
        given = [k for k in LAUNCHER_KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise _field_error(
                "",
                f"give exactly one of {', '.join(LAUNCHER_KINDS)}"
                + (f" (got {', '.join(given)})" if given else ""),
            )
        return self

    @property
    def kind(self) -> str:
        return next(k for k in LAUNCHER_KINDS if getattr(self, k) is not None)


class BenchmarkOptions(_Strict):
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


class DeploymentConfig(_Strict):
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
            raise _field_error(
                "engine.image",
                f"required for engine {self.engine.name!r}: an image pinned by digest, "
                "name@sha256:<64 hex>",
            )
        if self.launcher.kind in LAUNCHED_KINDS:
            _launch_runnable(self)
        if self.launcher.simulated is not None:
            system, model = simulator_profile_targets(self.launcher.simulated.profile)
            if system is not None and system != self.hardware:
                raise _field_error(
                    "launcher.simulated.profile",
                    f"profile simulates hardware {system!r}, the topology names {self.hardware!r}",
                )
            if model is not None and model != self.model.id:
                raise _field_error(
                    "launcher.simulated.profile",
                    f"profile simulates model {model!r}, the config names {self.model.id!r}",
                )
            _twin_serves_the_topology(self)
        if self.topology.mode == "disaggregated" and self.kv_cache.transfer == "none":
            raise _field_error("kv_cache.transfer", "disaggregated mode needs a KV transfer")
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
        raise _field_error(
            "launcher.simulated.overrides",
            f"the patched deployment serves on {used} accelerators (replicas × accelerators "
            f"of each role), the topology on {config.accelerators_used}: they must agree",
        )


def _launch_runnable(config: DeploymentConfig) -> None:
    """A launcher that starts `launch` needs it whole: one executable, a port, a model id;
    the container launcher also needs the image."""
    kind = config.launcher.kind
    if config.launch is None:
        raise _field_error("launch", f"required by launcher.{kind}: the command it runs")
    if any(ch.isspace() for ch in config.launch.command):
        raise _field_error(
            "launch.command",
            f"launcher.{kind} runs one executable with no shell: put its arguments in launch.args",
        )
    for name in ("port", "served_model_name"):
        if getattr(config.launch, name) is None:
            raise _field_error(f"launch.{name}", f"required by launcher.{kind}")
    if kind == "container" and config.engine.image is None:
        raise _field_error(
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
                    raise _field_error(
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
        raise _field_error(
            first["path"],
            f"fakes speculative acceptance ({first['setting']}): a benchmarked engine must "
            "verify every draft token",
        )


# --- parsing untrusted text ----------------------------------------------------------


class ConfigError(ValueError):
    """A config that cannot be accepted. `fields` maps dotted paths to messages."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "invalid_config",
        fields: dict[str, list[str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fields: dict[str, list[str]] = fields or {}

    def __str__(self) -> str:
        detail = "; ".join(f"{k}: {' '.join(v)}" for k, v in self.fields.items())
        return f"{self.message} {detail}".strip()


JSON_TYPES = ("application/json",)
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
# Declared text of either syntax: YAML is a superset of JSON, so the YAML reader serves both.
# A body with no Content-Type (or application/octet-stream, which says nothing more) is a
# 415: it is never guessed at (docs/security.md "YAML").
SNIFF_TYPES = ("text/plain",)
ACCEPTED_TYPES = JSON_TYPES + YAML_TYPES + SNIFF_TYPES


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _media_type(content_type: str) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


# The size limit's default; the web side passes its MAX_CONFIG_BYTES setting (config/settings.py,
# the same default) and the CLI the same environment variable (agentperf_cli/offline.py).
DEFAULT_MAX_CONFIG_BYTES = 256 * 1024


def load_document(
    text: str | bytes, content_type: str = "", *, limit: int = DEFAULT_MAX_CONFIG_BYTES
) -> Any:
    """The data in `text` (JSON or YAML), at most `limit` bytes; ConfigError when unreadable."""
    raw = text.encode() if isinstance(text, str) else text
    if len(raw) > limit:
        raise ConfigError(
            f"the config is {len(raw)} bytes; the limit is {limit}",
            code="too_large",
            fields={NON_FIELD: [f"larger than {limit} bytes"]},
        )
    try:
        body = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            "the config is not UTF-8", code="unparseable", fields={NON_FIELD: [str(exc)]}
        ) from None
    media = _media_type(content_type)
    if media not in ACCEPTED_TYPES:
        raise ConfigError(
            f"unsupported content type {media!r}; send JSON or YAML"
            if media
            else "no Content-Type was declared; send application/json or application/yaml",
            code="unsupported_media_type",
            fields={NON_FIELD: [f"accepted: {', '.join(ACCEPTED_TYPES)}"]},
        )
    if not body.strip():
        raise ConfigError("the config is empty", code="unparseable", fields={NON_FIELD: ["empty"]})
    from agentperf.schema import limits  # depth first: the readers below recurse
    from agentperf.schema.yaml12 import load_yaml  # the one YAML reader (docs/security.md "YAML")

    try:
        if media in JSON_TYPES:
            limits.check_json_depth(body)
            # non-finite constants are kept here and refused by path in check_values
            data = json.loads(body, object_pairs_hook=_json_pairs, parse_constant=float)
        else:
            data = load_yaml(body)  # YAML 1.2 core; depth, anchors, tags, keys checked
        limits.check_values(data, code="invalid_config")
    except limits.LimitError as exc:
        raise ConfigError(exc.message, code=exc.code, fields=exc.fields) from None
    except (ValueError, yaml.YAMLError) as exc:
        kind = "JSON" if media in JSON_TYPES else "YAML"
        raise ConfigError(
            f"the config is not valid {kind}",
            code="unparseable",
            fields={NON_FIELD: [" ".join(str(exc).split())]},
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            "the config must be a mapping at the top level",
            code="invalid_config",
            fields={NON_FIELD: [f"got {type(data).__name__}"]},
        )
    return data


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
