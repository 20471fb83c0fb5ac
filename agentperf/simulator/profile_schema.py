"""The profile YAML document as a pydantic model (``ProfileDocument``): its shape, types and
bounds, each refusal naming the field to fix (docs/simulator.md "Profiles and the source of
every number").

The document alone cannot say whether the catalog has the figures it names, whether every
number is sourced, or whether the weights fit in memory: ``agentperf.simulator.profile`` checks
those when it builds the ``Profile``. Each deployment section knows the ``Profile`` fields it
gives (``profile_fields``), with the defaults of a section left out.

Refusals read as the platform's field errors (``agentperf.fielderrors``), one per
``ProfileError``: ``deployment.efficiency.compute: must be ≥ 1e-06, got -1``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agentperf.fielderrors import CROSS_FIELD, message
from agentperf.simulator.profile_types import (
    MODES,
    OPEN_TREATMENTS,
    OUTPUT_KINDS,
    PRECISIONS,
    FitFrom,
    OpenParameter,
    ProfileError,
    RoleConfig,
)

# Ceilings on what a patched profile may ask of the twin (an override is a vendor's input:
# docs/simulator.md "Overrides"): past them a trial's memory or time has no bound.
MAX_ROLE_REPLICAS = 4096
MAX_ROLE_SIZE = 65536  # accelerators, tp, ep, max_batch of one role
MAX_CHUNK_TOKENS = 1 << 20
MAX_SPEC_K = 64  # as the config's speculative.draft_tokens
MAX_STEP_US = 1e6  # one scheduler iteration, draft step or transfer: at most a second
MAX_EOS_MEAN_TOKENS = 131072

# The role sections each deployment mode reads (docs/simulator.md "The model")
ROLES_OF_MODE: dict[str, tuple[str, ...]] = {
    "aggregated": ("aggregated",),
    "disaggregated": ("prefill", "decode"),
}


def refusal(text: str, path: str = "") -> PydanticCustomError:
    """A refusal in the profile's own words, at ``path`` (dotted) below the field whose
    validator raises it (agentperf.fielderrors ``CROSS_FIELD``)."""
    return PydanticCustomError(CROSS_FIELD, "{message}", {"message": text, "path": path})


def number_problem(
    value: Any, *, integer: bool = False, minimum: float = 0.0, maximum: float = math.inf
) -> str | None:
    """What keeps ``value`` from being a profile number within its bounds (None: nothing)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"expected a number, got {value!r}"
    if not math.isfinite(value):
        return f"expected a finite number, got {value!r}"
    if integer and int(value) != value:
        return f"expected an integer, got {value!r}"
    if value < minimum:
        return f"must be ≥ {minimum}, got {value!r}"
    if value > maximum:
        return f"must be ≤ {maximum:g}, got {value!r}"
    return None


def _number_validator(
    convert: Callable[[float], float | int], *, integer: bool, minimum: float, maximum: float
) -> PlainValidator:
    def check(value: Any) -> float | int:
        problem = number_problem(value, integer=integer, minimum=minimum, maximum=maximum)
        if problem is not None:
            raise refusal(problem)
        return convert(float(value))

    return PlainValidator(check)


def real(*, minimum: float = 0.0, maximum: float = math.inf) -> PlainValidator:
    """A finite number (no booleans) within [minimum, maximum], as a float."""
    return _number_validator(float, integer=False, minimum=minimum, maximum=maximum)


def whole(*, minimum: float = 0.0, maximum: float = math.inf) -> PlainValidator:
    """A whole number within [minimum, maximum] (2.0 counts), as an int."""
    return _number_validator(int, integer=True, minimum=minimum, maximum=maximum)


def truncated(*, minimum: float = 0.0, maximum: float = math.inf) -> PlainValidator:
    """A number within [minimum, maximum], its fraction dropped (a count read leniently)."""
    return _number_validator(int, integer=False, minimum=minimum, maximum=maximum)


def _flag(value: Any) -> bool:
    """A yes/no of the document: true or false only (``"false"`` or ``0`` is refused, never
    read as its truth value)."""
    if not isinstance(value, bool):
        raise refusal(f"expected true or false, got {type(value).__name__}")
    return value


Flag = Annotated[bool, PlainValidator(_flag)]


class _Mapping(BaseModel):
    """A mapping of the document: unknown keys refused, anything else is "expected a
    mapping". A section whose ``EMPTY_AS_DEFAULTS`` is set reads absent, null or empty as
    all its defaults (``false`` is not empty: it is refused, not read as the defaults)."""

    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)
    EMPTY_AS_DEFAULTS: ClassVar[bool] = False

    @model_validator(mode="before")
    @classmethod
    def _a_mapping(cls, data: Any) -> Any:
        if cls.EMPTY_AS_DEFAULTS and (data is None or data == {}):
            return {}
        if not isinstance(data, dict):
            raise refusal(f"expected a mapping, got {type(data).__name__}")
        return data


class _Section(_Mapping):
    EMPTY_AS_DEFAULTS: ClassVar[bool] = True


def _section() -> Any:
    """A section's default: validated as an empty one, so its required keys are named."""
    return Field(default=None, validate_default=True)


class RoleDocument(_Mapping):
    """``deployment.aggregated`` / ``prefill`` / ``decode``: one kind of engine instance."""

    replicas: Annotated[int, whole(minimum=1, maximum=MAX_ROLE_REPLICAS)]
    accelerators: Annotated[int, whole(minimum=1, maximum=MAX_ROLE_SIZE)]
    tp: Annotated[int | None, whole(minimum=1, maximum=MAX_ROLE_SIZE)] = None  # None: all
    ep: Annotated[int, whole(minimum=1, maximum=MAX_ROLE_SIZE)] = 1
    max_batch: Annotated[int, whole(minimum=1, maximum=MAX_ROLE_SIZE)]
    chunk_tokens: Annotated[int, whole(minimum=1, maximum=MAX_CHUNK_TOKENS)] = 8192
    request_chunk_tokens: Annotated[int, whole(maximum=MAX_CHUNK_TOKENS)] = 0

    def config(self, role: str) -> RoleConfig:
        return RoleConfig(
            role=role,
            replicas=self.replicas,
            accelerators=self.accelerators,
            tp=self.accelerators if self.tp is None else self.tp,
            ep=self.ep,
            max_batch=self.max_batch,
            chunk_tokens=self.chunk_tokens,
            request_chunk_tokens=self.request_chunk_tokens,
        )


class PrefixCaching(_Section):
    enabled: Flag = True
    block_tokens: Annotated[int, whole(minimum=1, maximum=MAX_CHUNK_TOKENS)] = 16

    def profile_fields(self) -> dict[str, Any]:
        return {"prefix_caching": self.enabled, "block_tokens": self.block_tokens}


class _ByKind(_Mapping):
    """A number per output kind (``OUTPUT_KINDS``), only the kinds given."""

    tool_call: float | None = None
    code: float | None = None
    prose: float | None = None

    def pairs(self) -> tuple[tuple[str, float], ...]:
        given = ((kind, getattr(self, kind)) for kind in OUTPUT_KINDS)
        return tuple((kind, value) for kind, value in given if value is not None)


class AcceptanceByKind(_ByKind):
    """First-draft acceptance by output kind (docs/simulator.md "Speculative decoding")."""

    tool_call: Annotated[float | None, real(maximum=1.0)] = None
    code: Annotated[float | None, real(maximum=1.0)] = None
    prose: Annotated[float | None, real(maximum=1.0)] = None


class KindMix(_ByKind):
    """The mix of output kinds for requests whose metadata names none."""

    tool_call: Annotated[float | None, real()] = None
    code: Annotated[float | None, real()] = None
    prose: Annotated[float | None, real()] = None


class Speculative(_Section):
    k: Annotated[int, whole(maximum=MAX_SPEC_K)] = 0
    acceptance: Annotated[float, real(maximum=1.0)] = 0.0
    draft_step_us: Annotated[float, real(maximum=MAX_STEP_US)] = 0.0
    acceptance_by_kind: AcceptanceByKind | None = None
    default_mix: KindMix | None = None
    position_decay: Annotated[float, real()] = 1.0
    verify_budget_tokens: Annotated[int, truncated()] = 0

    def profile_fields(self) -> dict[str, Any]:
        by_kind, mix = self.acceptance_by_kind, self.default_mix
        return {
            "spec_k": self.k,
            "spec_acceptance": self.acceptance,
            "draft_step_us": self.draft_step_us,
            "spec_acceptance_by_kind": by_kind.pairs() if by_kind else (),
            "spec_default_mix": mix.pairs() if mix else (),
            "spec_position_decay": self.position_decay,
            "spec_verify_budget_tokens": self.verify_budget_tokens,
        }


class Efficiency(_Section):
    compute: Annotated[float, real(minimum=1e-6)]
    bandwidth: Annotated[float, real(minimum=1e-6)]
    iteration_overhead_us: Annotated[float, real(maximum=MAX_STEP_US)]
    kv_transfer_gb_s: Annotated[float, real(minimum=1e-6)] = 100.0
    kv_transfer_latency_us: Annotated[float, real(maximum=MAX_STEP_US)] = 0.0

    def profile_fields(self) -> dict[str, Any]:
        return {
            "compute_efficiency": self.compute,
            "bandwidth_efficiency": self.bandwidth,
            "iteration_overhead_us": self.iteration_overhead_us,
            "kv_transfer_gb_s": self.kv_transfer_gb_s,
            "kv_transfer_latency_us": self.kv_transfer_latency_us,
        }


class Memory(_Section):
    reserve_fraction: Annotated[float, real()] = 0.1

    def profile_fields(self) -> dict[str, Any]:
        return {"memory_reserve_fraction": self.reserve_fraction}


class Attention(_Section):
    flops_per_token_per_context_token: Annotated[float, real()] = 0.0
    max_attended_tokens: Annotated[int, whole(minimum=1)] | None = None
    flops_per_token_per_full_context_token: Annotated[float, real()] = 0.0
    efficiency: Annotated[float | None, real(minimum=1e-6)] = None  # None: the GEMMs'
    data_parallel: Flag = False

    def profile_fields(self) -> dict[str, Any]:
        return {
            "attn_flops_per_ctx_token": self.flops_per_token_per_context_token,
            "max_attended_tokens": self.max_attended_tokens,
            "attn_flops_per_full_ctx_token": self.flops_per_token_per_full_context_token,
            "attn_efficiency": self.efficiency,
            "attention_dp": self.data_parallel,
        }


class MoeComm(_Mapping):
    """The expert-parallel all-to-all (absent: not modelled)."""

    moe_layers: Annotated[int, whole()]
    experts_per_token: Annotated[int, whole()]
    hidden_size: Annotated[int, whole()]
    bytes_per_element: Annotated[float, real()]
    link_gb_s: Annotated[float, real(minimum=1e-6)]
    efficiency: Annotated[float, real(minimum=1e-6)] = 1.0
    overlap: Flag = False

    # what an absent section gives (0 layers: no exchange)
    ABSENT: ClassVar[dict[str, Any]] = {
        "moe_comm_layers": 0,
        "moe_comm_experts_per_token": 0,
        "moe_comm_hidden": 0,
        "moe_comm_bytes_per_element": 0.0,
        "moe_comm_link_gb_s": 1.0,
        "moe_comm_efficiency": 1.0,
        "moe_comm_overlap": False,
    }

    def profile_fields(self) -> dict[str, Any]:
        return {
            "moe_comm_layers": self.moe_layers,
            "moe_comm_experts_per_token": self.experts_per_token,
            "moe_comm_hidden": self.hidden_size,
            "moe_comm_bytes_per_element": self.bytes_per_element,
            "moe_comm_link_gb_s": self.link_gb_s,
            "moe_comm_efficiency": self.efficiency,
            "moe_comm_overlap": self.overlap,
        }


class GroupedGemm(_Mapping):
    """Grouped-GEMM efficiency against tokens per expert (absent: not modelled)."""

    routed_experts: Annotated[int, whole()]
    experts_per_token: Annotated[int, whole()]
    half_efficiency_tokens_per_expert: Annotated[float, real()]
    routed_share: Annotated[float, real()] = 1.0
    efficiency: Annotated[float | None, real(minimum=1e-6)] = None  # None: the compute's

    def profile_fields(self) -> dict[str, Any]:
        return {
            "gemm_routed_experts": self.routed_experts,
            "gemm_experts_per_token": self.experts_per_token,
            "gemm_half_tokens_per_expert": self.half_efficiency_tokens_per_expert,
            "gemm_routed_share": self.routed_share,
            "gemm_efficiency": self.efficiency,
        }


class LoadImbalance(_Section):
    expert_skew: Annotated[float, real()] = 0.0
    statistical: Flag = False

    def profile_fields(self) -> dict[str, Any]:
        return {"ep_skew": self.expert_skew, "ep_statistical": self.statistical}


class Scheduler(_Section):
    step_us: Annotated[float, real(maximum=MAX_STEP_US)] = 0.0
    per_sequence_us: Annotated[float, real(maximum=MAX_STEP_US)] = 0.0
    per_token_us: Annotated[float, real(maximum=MAX_STEP_US)] = 0.0

    def profile_fields(self) -> dict[str, Any]:
        return {
            "sched_step_us": self.step_us,
            "sched_per_sequence_us": self.per_sequence_us,
            "sched_per_token_us": self.per_token_us,
        }


class Power(_Mapping):
    """Modelled power (absent or empty: not modelled; the TDP is the system's figure)."""

    idle_fraction: Annotated[float, real()] = 0.0


class Eos(_Section):
    mean_tokens: Annotated[int, truncated(minimum=1, maximum=MAX_EOS_MEAN_TOKENS)] = 256


class DeploymentDocument(_Mapping):
    """``deployment``: precision, roles, batching, caching, speculation and the cost model's
    efficiencies (docs/simulator.md "Profiles and the source of every number")."""

    precision: str = Field(default=None, validate_default=True)
    weight_bits: Annotated[float | None, real(minimum=1)] = None  # None: the model's
    mode: str = "aggregated"
    aggregated: RoleDocument | None = None
    prefill: RoleDocument | None = None
    decode: RoleDocument | None = None
    prefix_caching: PrefixCaching = _section()
    speculative: Speculative = _section()
    efficiency: Efficiency = _section()
    memory: Memory = _section()
    attention: Attention = _section()
    moe_weight_touch: Flag = True
    moe_comm: MoeComm | None = None
    grouped_gemm: GroupedGemm | None = None
    load_imbalance: LoadImbalance = _section()
    scheduler: Scheduler = _section()
    power: Power | None = None
    eos: Eos = _section()

    @field_validator("precision", mode="before")
    @classmethod
    def _known_precision(cls, value: Any) -> Any:
        if value not in PRECISIONS:
            raise refusal(f"one of {', '.join(PRECISIONS)}")
        return value

    @field_validator("mode", mode="before")
    @classmethod
    def _known_mode(cls, value: Any) -> Any:
        if value not in MODES:
            raise refusal(f"one of {', '.join(MODES)}")
        return value

    @field_validator("aggregated", "prefill", "decode", mode="before")
    @classmethod
    def _roles_the_mode_uses(cls, value: Any, info: ValidationInfo) -> Any:
        """A role section the mode does not use is not read (``mode`` is validated first)."""
        used = ROLES_OF_MODE.get(info.data.get("mode", ""), ())
        return value if info.field_name in used else None

    @field_validator("moe_comm", "grouped_gemm", "power", mode="before")
    @classmethod
    def _empty_is_absent(cls, value: Any) -> Any:
        """An empty section (null or {}) is an absent one; ``false`` is not empty (refused
        as "expected a mapping", never read as absent)."""
        return None if value is None or value == {} else value

    @model_validator(mode="after")
    def _roles_of_the_mode(self) -> DeploymentDocument:
        for name in ROLES_OF_MODE[self.mode]:
            if getattr(self, name) is None:
                raise refusal(f"required when mode is {self.mode}", name)
        return self

    def roles(self) -> tuple[RoleConfig, ...]:
        """The deployment's roles, in the order the mode names them."""
        names = ROLES_OF_MODE[self.mode]
        docs: list[RoleDocument | None] = [getattr(self, name) for name in names]
        return tuple(doc.config(name) for name, doc in zip(names, docs, strict=True) if doc)

    def profile_fields(self) -> dict[str, Any]:
        """The ``Profile`` fields the deployment gives, but the figures' (weight bits when
        the deployment has none, the accelerator's power)."""
        fields: dict[str, Any] = {
            "precision": self.precision,
            "mode": self.mode,
            "roles": self.roles(),
            "moe_weight_touch": self.moe_weight_touch,
            "eos_mean_tokens": self.eos.mean_tokens,
            "power_idle_fraction": self.power.idle_fraction if self.power else 0.0,
            **(self.moe_comm.profile_fields() if self.moe_comm else MoeComm.ABSENT),
            **(self.grouped_gemm.profile_fields() if self.grouped_gemm else {}),
        }
        for section in (
            self.prefix_caching,
            self.speculative,
            self.efficiency,
            self.memory,
            self.attention,
            self.load_imbalance,
            self.scheduler,
        ):
            fields.update(section.profile_fields())
        return fields


class OpenParameterDocument(_Mapping):
    """``open.parameters.<path>``: a range (or named alternatives) and why it is open."""

    range: Any = None  # [low, high]
    reason: Any = None
    integer: Flag = False
    choices: Any = None

    @model_validator(mode="after")
    def _range_or_choices(self) -> OpenParameterDocument:
        if not str(self.reason or "").strip():
            raise refusal("say why the description leaves it open", "reason")
        if "choices" in self.model_fields_set:
            choices = self.choices
            if not isinstance(choices, dict) or len(choices) < 2:
                raise refusal("at least two named deployment patches", "choices")
            for name, patch in choices.items():
                if not isinstance(patch, dict):
                    raise refusal("a merge patch of deployment", f"choices.{name}")
            return self
        if not isinstance(self.range, list) or len(self.range) != 2:
            raise refusal("[low, high]", "range")
        for value in self.range:
            problem = number_problem(value)
            if problem is not None:
                raise refusal(problem, "range")
        if not self.range[0] < self.range[1]:
            raise refusal("low must be below high", "range")
        return self

    @property
    def is_choice(self) -> bool:
        return "choices" in self.model_fields_set

    def parameter(self, path: str) -> OpenParameter:
        if self.is_choice:
            choices = tuple((str(k), dict(v)) for k, v in self.choices.items())
            return OpenParameter(path, 0.0, 0.0, str(self.reason), choices=choices)
        low, high = (float(v) for v in self.range)
        return OpenParameter(path, low, high, str(self.reason), bool(self.integer))


class OpenSection(_Mapping):
    """``open``: the parameters the description leaves open and how their band is read
    (docs/simulator.md "Bands")."""

    treatment: str = "envelope"
    parameters: dict[str, OpenParameterDocument] = Field(default_factory=dict)

    @field_validator("treatment", mode="before")
    @classmethod
    def _known_treatment(cls, value: Any) -> Any:
        if value not in OPEN_TREATMENTS:
            raise refusal(f"one of {', '.join(OPEN_TREATMENTS)}")
        return value

    @field_validator("parameters", mode="before")
    @classmethod
    def _parameters_mapping(cls, value: Any) -> Any:
        if value and not isinstance(value, dict):
            raise refusal(f"expected a mapping, got {type(value).__name__}")
        return value or {}

    @model_validator(mode="after")
    def _ranges_on_numbers(self) -> OpenSection:
        for path, spec in self.parameters.items():
            if not spec.is_choice and not path.startswith(("deployment.", "catalog_overrides.")):
                raise refusal(
                    "a path under deployment. or catalog_overrides.", f"parameters.{path}"
                )
        return self

    def open_parameters(self) -> tuple[OpenParameter, ...]:
        return tuple(spec.parameter(path) for path, spec in self.parameters.items())


class FitFromDocument(_Mapping):
    """``fit_from``: values of this profile that are shares of another profile's fitted
    values (docs/simulator.md "Bands")."""

    profile: str = Field(default=None, validate_default=True)
    reason: str = Field(default=None, validate_default=True)
    parameters: dict[str, str] = Field(default=None, validate_default=True)

    @field_validator("profile", mode="before")
    @classmethod
    def _a_profile(cls, value: Any) -> Any:
        if not isinstance(value, str) or not value.strip():
            raise refusal("the name of the profile whose fit is borrowed")
        return value

    @field_validator("reason", mode="before")
    @classmethod
    def _a_reason(cls, value: Any) -> str:
        if not str(value or "").strip():
            raise refusal("say how this profile's values derive from the fit")
        return str(value)

    @field_validator("parameters", mode="before")
    @classmethod
    def _deployment_paths(cls, value: Any) -> dict[str, str]:
        if not isinstance(value, dict) or not value:
            raise refusal("a mapping of this profile's path → fitted path")
        for own, fitted in value.items():
            if not str(own).startswith("deployment.") or not isinstance(fitted, str):
                raise refusal("a deployment. path mapped to the fitted path", str(own))
        return {str(own): fitted for own, fitted in value.items()}

    def fit_from(self) -> FitFrom:
        return FitFrom(self.profile, self.reason, tuple(self.parameters.items()))


class CatalogOverrides(_Section):
    """``catalog_overrides``: sourced figures the catalog leaves null, by system or model."""

    system: Any = None
    model: Any = None


def given_value(node: Any, dotted: str) -> Any:
    """The value the document gave at ``dotted`` (None where it gave none: a default is
    not given)."""
    for part in dotted.split("."):
        if not isinstance(node, BaseModel) or part not in node.model_fields_set:
            return None
        node = getattr(node, part)
    return node


class ProfileDocument(_Mapping):
    """A profile's YAML document: a catalog system and model (slugs or inline figures), a
    deployment, and the source of every number (docs/simulator.md)."""

    name: Annotated[str, PlainValidator(str)]
    label: Any = None  # None or empty: the name
    description: Any = None
    system: str | dict[str, Any]
    model: str | dict[str, Any]
    systems: Annotated[int, whole(minimum=1)] = 1
    served_model_names: list[str] | None = None  # None or empty: the model's slug
    catalog_overrides: CatalogOverrides = _section()
    deployment: DeploymentDocument
    sources: dict[str, str] = Field(default=None, validate_default=True)
    # the fit's declaration (agentperf.simulator.fit) and the parameters left open (bands)
    fit: Any = None
    open: OpenSection | None = None
    # values taken as shares of another profile's fitted values: its fit's uncertainty
    # carries over to this profile's band (agentperf.simulator.bands)
    fit_from: FitFromDocument | None = None

    @field_validator("system", "model", mode="before")
    @classmethod
    def _slug_or_inline(cls, value: Any) -> Any:
        if isinstance(value, str) or (isinstance(value, dict) and value.get("slug")):
            return value
        raise refusal("expected a catalog slug or an inline mapping with a slug")

    @field_validator("served_model_names", mode="before")
    @classmethod
    def _none_when_empty(cls, value: Any) -> Any:
        return value or None

    @field_validator("sources", mode="before")
    @classmethod
    def _sources_mapping(cls, value: Any) -> dict[str, str]:
        if not value:
            return {}
        if not isinstance(value, dict):
            raise refusal("expected a mapping of parameter path → source")
        return {str(k): str(v) for k, v in value.items()}

    @model_validator(mode="after")
    def _borrowed_values_exist(self) -> ProfileDocument:
        borrowed = self.fit_from
        if borrowed is None:
            return self
        if borrowed.profile == self.name:
            raise refusal("a profile with its own fit needs no fit_from", "fit_from.profile")
        for own in borrowed.parameters:
            node = given_value(self, own)
            if isinstance(node, bool) or not isinstance(node, int | float) or node <= 0:
                raise refusal(
                    "this profile has no positive number there", f"fit_from.parameters.{own}"
                )
        return self


def _refusal_text(exc: ValidationError, where: str) -> str:
    """The first refusal of ``exc`` as ``path: message`` (an unknown key first, as each
    level of the document is checked for its keys before its values); a refusal of the
    whole document or of a top-level key is prefixed with ``where`` (the file)."""
    errors = exc.errors(include_url=False)
    first = min(errors, key=lambda err: err["type"] != "extra_forbidden")
    loc = [str(part) for part in first["loc"]]
    if first["type"] == CROSS_FIELD:
        loc += [p for p in str((first.get("ctx") or {}).get("path", "")).split(".") if p]
    text = message(first)
    if not loc:
        return f"{where}: {text}"
    path = ".".join(loc)
    return f"{where}: {path}: {text}" if len(loc) == 1 else f"{path}: {text}"


def parse_profile_document(doc: Any, where: str) -> ProfileDocument:
    """``doc`` (the YAML's mapping) as a ``ProfileDocument``; a ProfileError naming the field
    to fix when it is not one (``where``: the file, for the document's own refusals)."""
    try:
        return ProfileDocument.model_validate(doc)
    except ValidationError as exc:
        raise ProfileError(_refusal_text(exc, where)) from None
