"""Simulator profiles: a catalog system + a catalog model + a deployment, every number sourced.

A profile is a YAML file (see ``agentperf/simulator/profiles/`` and ``docs/simulator.md``)::

    name: gb300-nvl72-dsv41flash
    system: gb300-nvl72              # catalog slug, or an inline mapping of figures
    model: deepseek-v4.1-flash-max   # catalog slug, or an inline mapping of figures
    catalog_overrides:               # figures the catalog leaves null (or that this profile
      system: {peak_tflops_dense: {fp4: {value: 15000, source: https://..., note: ...}}}
    deployment: {...}                # precision, roles, batching, caching, speculation, ...
    sources:                         # every numeric deployment leaf: URL or "assumption: why"
      deployment.efficiency: "assumption: ..."

Loading refuses a profile whose figures are missing or unsourced, with the path to fix.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentperf.catalog_data import Catalog, CatalogError, Figure, figure_from, load_catalog
from agentperf.mergepatch import merge_patch, patch_paths

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
# fp4/fp8/bf16: accelerator peaks; f32, q8_0, q4_0, q4_1: llama.cpp GGUF types (CPU profiles,
# docs/simulator.md "Hold-out")
PRECISIONS = ("fp4", "fp8", "bf16", "f32", "q8_0", "q4_0", "q4_1")
MODES = ("aggregated", "disaggregated")

SYSTEM_FIGURES = ("accelerators_per_system", "memory_gb_per_accelerator", "hbm_bandwidth_tb_s")
MODEL_FIGURES = (
    "total_params_b",
    "active_params_prefill_b",
    "active_params_decode_b",
    "context_length",
    "kv_bytes_per_token",
    "weight_bits",
)

_ROLE_KEYS = {
    "replicas",
    "accelerators",
    "tp",
    "ep",
    "max_batch",
    "chunk_tokens",
    "request_chunk_tokens",
}
# Kinds of output text a turn's metadata may name (``output_kind``); acceptance of
# speculative drafts depends on them (docs/simulator.md "Speculative decoding").
OUTPUT_KINDS = ("tool_call", "code", "prose")
_DEPLOYMENT_KEYS = {
    "precision",
    "weight_bits",
    "mode",
    "aggregated",
    "prefill",
    "decode",
    "prefix_caching",
    "speculative",
    "efficiency",
    "memory",
    "attention",
    "moe_weight_touch",
    "moe_comm",
    "grouped_gemm",
    "load_imbalance",
    "scheduler",
    "power",
    "eos",
}
_SECTION_KEYS = {
    "prefix_caching": {"enabled", "block_tokens"},
    "speculative": {
        "k",
        "acceptance",
        "draft_step_us",
        "acceptance_by_kind",
        "default_mix",
        "position_decay",
        "verify_budget_tokens",
    },
    "efficiency": {
        "compute",
        "bandwidth",
        "iteration_overhead_us",
        "kv_transfer_gb_s",
        "kv_transfer_latency_us",
    },
    "memory": {"reserve_fraction"},
    "attention": {
        "flops_per_token_per_context_token",
        "max_attended_tokens",
        "flops_per_token_per_full_context_token",
        "efficiency",
        "data_parallel",
    },
    "grouped_gemm": {
        "routed_experts",
        "experts_per_token",
        "half_efficiency_tokens_per_expert",
        "routed_share",
        "efficiency",
    },
    "load_imbalance": {"expert_skew", "statistical"},
    "scheduler": {"step_us", "per_sequence_us", "per_token_us"},
    "power": {"idle_fraction"},
    "moe_comm": {
        "moe_layers",
        "experts_per_token",
        "hidden_size",
        "bytes_per_element",
        "link_gb_s",
        "efficiency",
        "overlap",
    },
    "eos": {"mean_tokens"},
}
_TOP_KEYS = {
    "name",
    "label",
    "description",
    "system",
    "model",
    "systems",
    "served_model_names",
    "catalog_overrides",
    "deployment",
    "sources",
    # the fit's declaration (agentperf.simulator.fit) and the parameters left open (bands)
    "fit",
    "open",
    # values taken as shares of another profile's fitted values: its fit's uncertainty
    # carries over to this profile's band (agentperf.simulator.bands)
    "fit_from",
}
OPEN_TREATMENTS = ("envelope", "vendor_optimal")


class ProfileError(ValueError):
    """A profile that cannot be loaded; the message names the field to fix."""


@dataclass(slots=True, frozen=True)
class OpenParameter:
    """A number the deployment's description leaves open: the twin reports a band over
    ``low``…``high`` (docs/simulator.md "Bands"), the profile's value is the nominal one."""

    path: str  # dotted from the profile's root: deployment.… or catalog_overrides.…
    low: float
    high: float
    reason: str
    integer: bool = False
    # or named alternatives, each a JSON Merge Patch of the deployment (a split of GPUs
    # changes several numbers at once); the path is then the parameter's name
    choices: tuple[tuple[str, dict[str, Any]], ...] = ()


@dataclass(slots=True, frozen=True)
class FitFrom:
    """Values of this profile that are shares of another profile's fitted values
    (``fit_from``): that fit's uncertainty samples move them by the same ratio."""

    profile: str  # the profile whose fit record (<profile>.fit.json) is borrowed
    reason: str
    parameters: tuple[tuple[str, str], ...]  # (this profile's path, the fitted path)


# Fewest data-parallel ranks a mean-field slice of one replica keeps: its ghost ranks draw
# from its own ranks' work, and 3 ranks (GB300 at k = 24) put TTFT p75 7-11 % off the whole
# rack's (docs/benchmarks.md "Rack scale in under five minutes: mean-field trials").
MIN_SLICE_RANKS = 8


@dataclass(slots=True, frozen=True)
class RoleConfig:
    """One kind of engine instance: ``replicas`` copies of ``accelerators`` accelerators each."""

    role: str  # "aggregated" | "prefill" | "decode"
    replicas: int
    accelerators: int
    tp: int
    ep: int
    max_batch: int
    chunk_tokens: int
    # Most prefill tokens one request gets in one iteration (a DP rank's own budget in a
    # data-parallel-attention replica); defaults to chunk_tokens.
    request_chunk_tokens: int = 0
    # Mean-field thinning (docs/simulator.md "Mean-field trials"): this replica stands for
    # one of ``mean_field`` equal slices of the real one: 1/mean_field of its data-parallel
    # ranks, batch, chunk budget and KV cache, while its expert-parallel terms (weights
    # touched, grouped-GEMM efficiency, EP imbalance) see the whole replica's tokens.
    mean_field: int = 1

    @property
    def dp(self) -> int:
        """Data-parallel ranks of the replica (attention, scheduling): accelerators ÷ TP."""
        return max(1, self.accelerators // max(1, self.tp))


@dataclass(slots=True, frozen=True)
class Profile:
    name: str
    label: str
    path: Path | None
    system_slug: str
    model_slug: str
    served_model_names: tuple[str, ...]
    systems: int
    # hardware (per accelerator)
    accelerators_per_system: int
    memory_gb: float
    hbm_tb_s: float
    peak_tflops: float  # dense, at the deployment precision
    # model
    total_params_b: float
    active_prefill_b: float
    active_decode_b: float
    context_length: int
    kv_bytes_per_token: float
    weight_bits: float
    # deployment
    precision: str
    mode: str
    roles: tuple[RoleConfig, ...]
    prefix_caching: bool
    block_tokens: int
    spec_k: int
    spec_acceptance: float
    draft_step_us: float
    compute_efficiency: float
    bandwidth_efficiency: float
    iteration_overhead_us: float
    kv_transfer_gb_s: float
    kv_transfer_latency_us: float
    memory_reserve_fraction: float
    attn_flops_per_ctx_token: float
    max_attended_tokens: int | None
    moe_weight_touch: bool
    eos_mean_tokens: int
    # Expert-parallel all-to-all per iteration (0 layers: not modelled); see CostModel.
    moe_comm_layers: int = 0
    moe_comm_experts_per_token: int = 0
    moe_comm_hidden: int = 0
    moe_comm_bytes_per_element: float = 0.0
    moe_comm_link_gb_s: float = 0.0
    moe_comm_efficiency: float = 1.0
    moe_comm_overlap: bool = False
    # Speculative acceptance by output kind, mix of kinds for requests without metadata,
    # and the decay of acceptance along the draft (docs/simulator.md "Speculative decoding").
    spec_acceptance_by_kind: tuple[tuple[str, float], ...] = ()
    spec_default_mix: tuple[tuple[str, float], ...] = ()
    spec_position_decay: float = 1.0
    # Confidence-scheduled verification: at most this many verify tokens per iteration; a
    # larger batch verifies only its first (most confident) drafts. 0: always all k.
    spec_verify_budget_tokens: int = 0
    # Grouped-GEMM efficiency vs tokens per expert (0: not modelled).
    gemm_routed_experts: int = 0
    gemm_experts_per_token: int = 0
    gemm_half_tokens_per_expert: float = 0.0
    # Share of the active parameters in routed experts (the rest: attention, shared expert,
    # dense layers, run per data-parallel rank when attention_dp).
    gemm_routed_share: float = 1.0
    # Peak share the routed-expert grouped GEMMs reach at large m (None: efficiency.compute).
    gemm_efficiency: float | None = None
    # Data-parallel attention: each sequence's attention, dense layers and KV reads run on
    # its own rank; the iteration waits for the busiest rank.
    attention_dp: bool = False
    # Expert-parallel load imbalance: popularity skew and/or statistical max-of-ranks.
    ep_skew: float = 0.0
    ep_statistical: bool = False
    # Per-iteration scheduler, sampling and output-processing cost.
    sched_step_us: float = 0.0
    sched_per_sequence_us: float = 0.0
    sched_per_token_us: float = 0.0
    # Long-context attention: FLOPs per query token per (uncapped) context token, and the
    # attention kernels' share of peak (None: the GEMM efficiency).
    attn_flops_per_full_ctx_token: float = 0.0
    attn_efficiency: float | None = None
    # Modelled power per accelerator (None: not modelled).
    power_tdp_w: float | None = None
    power_idle_fraction: float = 0.0
    provenance: dict[str, str] = field(default_factory=dict)
    # Parameters the description leaves open, and how the band over them is read:
    # "envelope" (every value in the range) or "vendor_optimal" (the best a vendor tuning
    # them reaches at each speed). Docs: docs/simulator.md "Bands".
    open_parameters: tuple[OpenParameter, ...] = ()
    fit_from: FitFrom | None = None
    open_treatment: str = "envelope"

    @property
    def power_idle_w(self) -> float:
        """Modelled idle power per accelerator (0 when power is not modelled)."""
        return 0.0 if self.power_tdp_w is None else self.power_tdp_w * self.power_idle_fraction

    def modelled_power_w(self, dynamic_energy_j: float, seconds: float) -> float | None:
        """Mean modelled power of the accelerators used over ``seconds`` in which the
        deployment's dynamic energy counter advanced by ``dynamic_energy_j``."""
        if self.power_tdp_w is None or seconds <= 0:
            return None
        return self.accelerators_used * self.power_idle_w + dynamic_energy_j / seconds

    def acceptance_for(self, kind: str | None) -> float:
        """First-draft acceptance of output of ``kind`` (the profile's base if not listed)."""
        if kind is not None:
            for name, a in self.spec_acceptance_by_kind:
                if name == kind:
                    return a
        return self.spec_acceptance

    def acceptance_curve(self, first: float) -> list[float]:
        """P(draft j accepted | drafts before it accepted), j = 1..k: first · decay^(j−1)."""
        return [min(1.0, first * self.spec_position_decay**j) for j in range(self.spec_k)]

    def tokens_per_step_at(self, first: float) -> float:
        """Expected tokens per decode step with first-draft acceptance ``first``:
        1 + Σ_j Π_{i≤j} α_i (the accepted prefix of the draft, plus the verified token)."""
        total, surv = 1.0, 1.0
        for a in self.acceptance_curve(first):
            surv *= a
            total += surv
        return total

    def mix_weights(self) -> list[tuple[str, float]]:
        """The default output-kind mix, normalised (empty: one kind at the base acceptance)."""
        tot = sum(w for _, w in self.spec_default_mix)
        return [(k, w / tot) for k, w in self.spec_default_mix] if tot > 0 else []

    def moe_comm_bytes_per_token(self, ep: int) -> float:
        """Bytes one token sends to experts on other GPUs and gets back, per iteration:
        MoE layers × experts per token × hidden × bytes per element (dispatch + combine)
        × the share of experts that live on another of the ``ep`` GPUs."""
        if ep <= 1 or not self.moe_comm_layers:
            return 0.0
        return (
            self.moe_comm_layers
            * self.moe_comm_experts_per_token
            * self.moe_comm_hidden
            * self.moe_comm_bytes_per_element
            * (1.0 - 1.0 / ep)
        )

    @property
    def accelerators_used(self) -> int:
        """Accelerators that serve (prefill + decode roles), not the rack size."""
        return sum(r.replicas * r.accelerators for r in self.roles)

    @property
    def accelerators_total(self) -> int:
        return self.systems * self.accelerators_per_system

    @property
    def weight_bytes(self) -> float:
        return self.total_params_b * 1e9 * self.weight_bits / 8.0

    @property
    def spec_tokens_per_step(self) -> float:
        """Expected tokens per decode step, averaged over the default output mix; with one
        acceptance α and no decay it is (1 − α^(k+1)) / (1 − α); 1 without speculation."""
        if self.spec_k == 0:
            return 1.0
        mix = self.mix_weights()
        if not mix:
            return self.tokens_per_step_at(self.spec_acceptance)
        return sum(w * self.tokens_per_step_at(self.acceptance_for(k)) for k, w in mix)

    def role(self, name: str) -> RoleConfig:
        for r in self.roles:
            if r.role == name:
                return r
        raise KeyError(name)

    def kv_capacity_tokens(self, role: RoleConfig) -> int:
        """KV cache of one replica: HBM left after weights and the reserve, in tokens (a
        mean-field slice holds its share of the whole replica's)."""
        s = role.mean_field
        hbm = role.accelerators * s * self.memory_gb * 1e9 * (1.0 - self.memory_reserve_fraction)
        return int((hbm - self.weight_bytes) // self.kv_bytes_per_token) // s

    def mean_field_factors(self) -> tuple[int, ...]:
        """The factors k by which ``thinned`` can slice this deployment (1 first)."""
        return tuple(k for k in range(1, self.accelerators_used + 1) if self._thin_roles(k))

    def thinned(self, k: int) -> Profile:
        """This deployment cut to a 1/k slice that serves 1/k of the agents the same way
        (docs/simulator.md "Mean-field trials"): roles of several replicas keep 1/k of them;
        a single data-parallel-attention replica keeps 1/k of its ranks, batch, chunk
        budget and KV cache (``RoleConfig.mean_field``)."""
        roles = self._thin_roles(k)
        if roles is None:
            raise ValueError(f"{self.name} cannot be cut into {k} equal slices")
        return dataclasses.replace(self, roles=roles)

    def _thin_roles(self, k: int) -> tuple[RoleConfig, ...] | None:
        if k == 1:
            return self.roles
        if k < 1 or any(r.mean_field != 1 for r in self.roles):
            return None
        out = []
        for r in self.roles:
            if r.replicas % k == 0:
                out.append(dataclasses.replace(r, replicas=r.replicas // k))
            elif (
                r.replicas == 1
                and self.attention_dp
                and r.dp % k == 0
                and r.dp // k >= MIN_SLICE_RANKS
                and r.max_batch % k == 0
                and r.chunk_tokens % k == 0
            ):
                out.append(
                    dataclasses.replace(
                        r,
                        accelerators=r.accelerators // k,
                        max_batch=r.max_batch // k,
                        chunk_tokens=r.chunk_tokens // k,
                        request_chunk_tokens=r.request_chunk_tokens or r.chunk_tokens,
                        mean_field=k,
                    )
                )
            else:
                return None
        return tuple(out)


def repo_relative(path: Path) -> str:
    """``path`` relative to the repository (the profiles' records name their files so);
    as given when it lies outside it."""
    root = PROFILES_DIR.parent.parent.parent
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


def resolve_profile_path(profile: str | Path) -> Path:
    """A profile name (file in ``agentperf/simulator/profiles/``) or a path."""
    p = Path(profile)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return p
    for candidate in (PROFILES_DIR / f"{profile}.yaml", PROFILES_DIR / f"{profile}.yml"):
        if candidate.is_file():
            return candidate
    if p.is_file():
        return p
    known = ", ".join(available_profiles()) or "none"
    raise ProfileError(f"profile {str(profile)!r} not found (a path, or one of: {known})")


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def load_profile(
    profile: str | Path, *, catalog: Catalog | None = None, catalog_dir: str | Path | None = None
) -> Profile:
    """Load and validate a profile; the catalog is read only if the profile names slugs."""
    path = resolve_profile_path(profile)
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML: {exc}") from exc
    return profile_from_dict(doc, path=path, catalog=catalog, catalog_dir=catalog_dir)


OVERRIDE_SOURCE = "the deployment config's override (launcher.simulated.overrides): a what-if"


def profile_document(
    profile: str | Path, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The profile's YAML document with its ``deployment`` section patched by ``overrides``
    (a JSON Merge Patch, RFC 7396; docs/simulator.md "Overrides"). The patch reaches only
    ``deployment``: what the profile simulates (system, model, served names) stays."""
    path = resolve_profile_path(profile)
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise ProfileError(f"{path}: expected a mapping")
    if overrides:
        if not isinstance(overrides, dict):
            raise ProfileError("overrides: a JSON Merge Patch (a mapping) of deployment")
        # a profile refuses unsourced figures: each overridden one is sourced by the override
        sources = dict(doc.get("sources") or {})
        for leaf in patch_paths(overrides):
            sources.setdefault(f"deployment.{leaf}", OVERRIDE_SOURCE)
        doc = {
            **doc,
            "deployment": merge_patch(doc.get("deployment"), overrides),
            "sources": sources,
        }
    return doc


def load_profile_with(profile: str | Path, overrides: dict[str, Any] | None = None) -> Profile:
    """``load_profile`` with ``overrides`` applied to the ``deployment`` section first; a
    patched value that does not fit is a ProfileError naming its field."""
    if not overrides:
        return load_profile(profile)
    doc = profile_document(profile, overrides)
    return profile_from_dict(doc, path=resolve_profile_path(profile))


def _check_keys(obj: Any, allowed: set[str], where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ProfileError(f"{where}: expected a mapping, got {type(obj).__name__}")
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise ProfileError(f"{where}: unknown field(s) {', '.join(unknown)}")
    return obj


# Ceilings on what a patched profile may ask of the twin (an override is a vendor's input:
# docs/simulator.md "Overrides"): past them a trial's memory or time has no bound.
MAX_ROLE_REPLICAS = 4096
MAX_ROLE_SIZE = 65536  # accelerators, tp, ep, max_batch of one role
MAX_CHUNK_TOKENS = 1 << 20
MAX_SPEC_K = 64  # as the config's speculative.draft_tokens
MAX_STEP_US = 1e6  # one scheduler iteration, draft step or transfer: at most a second
MAX_EOS_MEAN_TOKENS = 131072


def _number(
    value: Any,
    where: str,
    *,
    integer: bool = False,
    minimum: float = 0.0,
    maximum: float = math.inf,
) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProfileError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value):
        raise ProfileError(f"{where}: expected a finite number, got {value!r}")
    if integer and int(value) != value:
        raise ProfileError(f"{where}: expected an integer, got {value!r}")
    if value < minimum:
        raise ProfileError(f"{where}: must be ≥ {minimum}, got {value!r}")
    if value > maximum:
        raise ProfileError(f"{where}: must be ≤ {maximum:g}, got {value!r}")
    return float(value)


def _resolve_entry(
    kind: str,
    ref: Any,
    names: tuple[str, ...],
    overrides: dict[str, Any],
    catalog_getter: Any,
) -> tuple[str, dict[str, Figure]]:
    """Figures of a system or model: from the catalog (by slug) or inline, then overrides."""
    if isinstance(ref, str):
        try:
            entry = catalog_getter(ref)
        except CatalogError as exc:
            raise ProfileError(f"{kind}: {exc}") from exc
        slug, origin = ref, f"catalog {kind} {ref!r}"
    elif isinstance(ref, dict) and ref.get("slug"):
        entry, slug, origin = ref, str(ref["slug"]), f"inline {kind}"
    else:
        raise ProfileError(f"{kind}: expected a catalog slug or an inline mapping with a slug")
    figures: dict[str, Figure] = {}
    for name in names:
        override = _dig(overrides, name)
        if override is not None:
            try:
                fig = figure_from(override, path=f"catalog_overrides.{kind}.{name}")
            except CatalogError as exc:
                raise ProfileError(str(exc)) from exc
            if fig.value is None or not fig.source.strip():
                raise ProfileError(
                    f"catalog_overrides.{kind}.{name}: an override needs a value and a source"
                )
            figures[name] = fig
            continue
        raw = _dig(entry, name)
        if raw is None or (isinstance(raw, dict) and raw.get("value") is None):
            raise ProfileError(
                f"{origin} has no value for {name!r}; supply it under "
                f"catalog_overrides.{kind}.{name} as {{value, source, note}}"
            )
        if isinstance(raw, dict):
            try:
                figures[name] = figure_from(raw, path=f"{origin}.{name}")
            except CatalogError as exc:
                raise ProfileError(str(exc)) from exc
        else:  # a bare scalar in the catalog (e.g. a count): keep it, note the origin
            figures[name] = Figure(value=raw, source=origin, note="bare catalog value")
    return slug, figures


def _dig(obj: Any, dotted: str) -> Any:
    node = obj
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _numeric_leaves(obj: Any, prefix: str) -> list[str]:
    if isinstance(obj, dict):
        out: list[str] = []
        for k, v in obj.items():
            out.extend(_numeric_leaves(v, f"{prefix}.{k}"))
        return out
    if isinstance(obj, int | float) and not isinstance(obj, bool):
        return [prefix]
    return []


def _source_for(path: str, sources: dict[str, str]) -> str | None:
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        key = ".".join(parts[:i])
        if key in sources:
            return sources[key]
    return None


def _role(raw: Any, role: str, where: str) -> RoleConfig:
    obj = _check_keys(raw, _ROLE_KEYS, where)
    for req in ("replicas", "accelerators", "max_batch"):
        if req not in obj:
            raise ProfileError(f"{where}.{req}: required")
    accelerators = int(
        _number(
            obj["accelerators"],
            f"{where}.accelerators",
            integer=True,
            minimum=1,
            maximum=MAX_ROLE_SIZE,
        )
    )
    chunk_default = 8192
    return RoleConfig(
        role=role,
        replicas=int(
            _number(
                obj["replicas"],
                f"{where}.replicas",
                integer=True,
                minimum=1,
                maximum=MAX_ROLE_REPLICAS,
            )
        ),
        accelerators=accelerators,
        tp=int(
            _number(
                obj.get("tp", accelerators),
                f"{where}.tp",
                integer=True,
                minimum=1,
                maximum=MAX_ROLE_SIZE,
            )
        ),
        ep=int(
            _number(obj.get("ep", 1), f"{where}.ep", integer=True, minimum=1, maximum=MAX_ROLE_SIZE)
        ),
        max_batch=int(
            _number(
                obj["max_batch"],
                f"{where}.max_batch",
                integer=True,
                minimum=1,
                maximum=MAX_ROLE_SIZE,
            )
        ),
        chunk_tokens=int(
            _number(
                obj.get("chunk_tokens", chunk_default),
                f"{where}.chunk_tokens",
                integer=True,
                minimum=1,
                maximum=MAX_CHUNK_TOKENS,
            )
        ),
        request_chunk_tokens=int(
            _number(
                obj.get("request_chunk_tokens", 0),
                f"{where}.request_chunk_tokens",
                integer=True,
                maximum=MAX_CHUNK_TOKENS,
            )
        ),
    )


def _kind_map(
    raw: Any, where: str, *, maximum: float | None = None
) -> tuple[tuple[str, float], ...]:
    """A mapping output kind → number (acceptance or share), kinds from OUTPUT_KINDS."""
    if raw is None:
        return ()
    obj = _check_keys(raw, set(OUTPUT_KINDS), where)
    out = []
    for kind in OUTPUT_KINDS:
        if kind in obj:
            v = _number(obj[kind], f"{where}.{kind}")
            if maximum is not None and v > maximum:
                raise ProfileError(f"{where}.{kind}: must be ≤ {maximum}")
            out.append((kind, v))
    return tuple(out)


def profile_from_dict(
    doc: Any,
    *,
    path: Path | None = None,
    catalog: Catalog | None = None,
    catalog_dir: str | Path | None = None,
) -> Profile:
    where = str(path) if path else "profile"
    doc = _check_keys(doc, _TOP_KEYS, where)
    for req in ("name", "system", "model", "deployment"):
        if req not in doc:
            raise ProfileError(f"{where}: {req}: required")
    dep = _check_keys(doc["deployment"], _DEPLOYMENT_KEYS, "deployment")
    overrides = doc.get("catalog_overrides") or {}
    _check_keys(overrides, {"system", "model"}, "catalog_overrides")
    sources_raw = doc.get("sources") or {}
    if not isinstance(sources_raw, dict):
        raise ProfileError("sources: expected a mapping of parameter path → source")
    sources = {str(k): str(v) for k, v in sources_raw.items()}

    precision = dep.get("precision")
    if precision not in PRECISIONS:
        raise ProfileError(f"deployment.precision: one of {', '.join(PRECISIONS)}")
    mode = dep.get("mode", "aggregated")
    if mode not in MODES:
        raise ProfileError(f"deployment.mode: one of {', '.join(MODES)}")

    lazy: dict[str, Catalog] = {}

    def get_catalog() -> Catalog:
        if catalog is not None:
            return catalog
        if "c" not in lazy:
            try:
                lazy["c"] = load_catalog(catalog_dir)
            except CatalogError as exc:
                raise ProfileError(str(exc)) from exc
        return lazy["c"]

    sys_names: tuple[str, ...] = (*SYSTEM_FIGURES, f"peak_tflops_dense.{precision}")
    # modelled power needs the accelerator's TDP (catalog or a sourced override)
    if dep.get("power"):
        sys_names = (*sys_names, "accelerator_power_w")
    system_slug, sysf = _resolve_entry(
        "system",
        doc["system"],
        sys_names,
        overrides.get("system") or {},
        lambda slug: get_catalog().system(slug),
    )
    model_names = MODEL_FIGURES if "weight_bits" not in dep else MODEL_FIGURES[:-1]
    model_slug, modf = _resolve_entry(
        "model",
        doc["model"],
        model_names,
        overrides.get("model") or {},
        lambda slug: get_catalog().model(slug),
    )

    # Every numeric deployment leaf needs a source (a URL) or a stated assumption.
    missing = [
        leaf for leaf in _numeric_leaves(dep, "deployment") if _source_for(leaf, sources) is None
    ]
    if missing:
        raise ProfileError(
            "deployment parameters without a source or assumption under `sources`: "
            + ", ".join(missing)
        )

    if mode == "aggregated":
        if "aggregated" not in dep:
            raise ProfileError("deployment.aggregated: required when mode is aggregated")
        roles: tuple[RoleConfig, ...] = (
            _role(dep["aggregated"], "aggregated", "deployment.aggregated"),
        )
    else:
        for req in ("prefill", "decode"):
            if req not in dep:
                raise ProfileError(f"deployment.{req}: required when mode is disaggregated")
        roles = (
            _role(dep["prefill"], "prefill", "deployment.prefill"),
            _role(dep["decode"], "decode", "deployment.decode"),
        )

    pc = _check_keys(dep.get("prefix_caching") or {}, _SECTION_KEYS["prefix_caching"], "pc")
    spec = dep.get("speculative") or {}
    _check_keys(spec, _SECTION_KEYS["speculative"], "deployment.speculative")
    eff = _check_keys(dep.get("efficiency") or {}, _SECTION_KEYS["efficiency"], "efficiency")
    mem = _check_keys(dep.get("memory") or {}, _SECTION_KEYS["memory"], "deployment.memory")
    attn = _check_keys(dep.get("attention") or {}, _SECTION_KEYS["attention"], "attention")
    eos = _check_keys(dep.get("eos") or {}, _SECTION_KEYS["eos"], "deployment.eos")
    comm = _check_keys(dep.get("moe_comm") or {}, _SECTION_KEYS["moe_comm"], "deployment.moe_comm")
    gemm = _check_keys(
        dep.get("grouped_gemm") or {}, _SECTION_KEYS["grouped_gemm"], "deployment.grouped_gemm"
    )
    if gemm:
        for req in ("routed_experts", "experts_per_token", "half_efficiency_tokens_per_expert"):
            if req not in gemm:
                raise ProfileError(f"deployment.grouped_gemm.{req}: required")
    imb = _check_keys(
        dep.get("load_imbalance") or {}, _SECTION_KEYS["load_imbalance"], "load_imbalance"
    )
    sched = _check_keys(dep.get("scheduler") or {}, _SECTION_KEYS["scheduler"], "scheduler")
    power = _check_keys(dep.get("power") or {}, _SECTION_KEYS["power"], "deployment.power")
    if comm:
        for req in ("moe_layers", "experts_per_token", "hidden_size", "bytes_per_element"):
            if req not in comm:
                raise ProfileError(f"deployment.moe_comm.{req}: required")
        if "link_gb_s" not in comm:
            raise ProfileError("deployment.moe_comm.link_gb_s: required")
    for req in ("compute", "bandwidth", "iteration_overhead_us"):
        if req not in eff:
            raise ProfileError(f"deployment.efficiency.{req}: required")

    weight_bits = (
        _number(dep["weight_bits"], "deployment.weight_bits", minimum=1)
        if "weight_bits" in dep
        else _number(modf["weight_bits"].value, "model.weight_bits", minimum=1)
    )
    acceptance = _number(spec.get("acceptance", 0.0), "deployment.speculative.acceptance")
    if acceptance > 1.0:
        raise ProfileError("deployment.speculative.acceptance: must be ≤ 1")
    max_attended = attn.get("max_attended_tokens")

    prov: dict[str, str] = {}
    for name, fig in sysf.items():
        prov[f"system.{name}"] = fig.source + (f" ({fig.note})" if fig.note else "")
    for name, fig in modf.items():
        prov[f"model.{name}"] = fig.source + (f" ({fig.note})" if fig.note else "")
    for leaf in _numeric_leaves(dep, "deployment"):
        prov[leaf] = _source_for(leaf, sources) or ""

    def sf(name: str, minimum: float = 0.0) -> float:
        return _number(sysf[name].value, f"system.{name}", minimum=minimum)

    def mf(name: str, minimum: float = 0.0) -> float:
        return _number(modf[name].value, f"model.{name}", minimum=minimum)

    served = doc.get("served_model_names") or [model_slug]
    prof = Profile(
        name=str(doc["name"]),
        label=str(doc.get("label") or doc["name"]),
        path=path,
        system_slug=system_slug,
        model_slug=model_slug,
        served_model_names=tuple(str(s) for s in served),
        systems=int(_number(doc.get("systems", 1), "systems", integer=True, minimum=1)),
        accelerators_per_system=int(sf("accelerators_per_system", 1)),
        memory_gb=sf("memory_gb_per_accelerator", 1e-9),
        hbm_tb_s=sf("hbm_bandwidth_tb_s", 1e-9),
        peak_tflops=sf(f"peak_tflops_dense.{precision}", 1e-9),
        total_params_b=mf("total_params_b", 1e-9),
        active_prefill_b=mf("active_params_prefill_b", 1e-9),
        active_decode_b=mf("active_params_decode_b", 1e-9),
        context_length=int(mf("context_length", 1)),
        kv_bytes_per_token=mf("kv_bytes_per_token", 1e-9),
        weight_bits=weight_bits,
        precision=str(precision),
        mode=str(mode),
        roles=roles,
        prefix_caching=bool(pc.get("enabled", True)),
        block_tokens=int(
            _number(
                pc.get("block_tokens", 16),
                "deployment.prefix_cache.block_tokens",
                integer=True,
                minimum=1,
                maximum=MAX_CHUNK_TOKENS,
            )
        ),
        spec_k=int(
            _number(spec.get("k", 0), "deployment.speculative.k", integer=True, maximum=MAX_SPEC_K)
        ),
        spec_acceptance=acceptance,
        draft_step_us=_number(
            spec.get("draft_step_us", 0.0),
            "deployment.speculative.draft_step_us",
            maximum=MAX_STEP_US,
        ),
        compute_efficiency=_number(eff["compute"], "deployment.efficiency.compute", minimum=1e-6),
        bandwidth_efficiency=_number(eff["bandwidth"], "efficiency.bandwidth", minimum=1e-6),
        iteration_overhead_us=_number(
            eff["iteration_overhead_us"],
            "deployment.efficiency.iteration_overhead_us",
            maximum=MAX_STEP_US,
        ),
        kv_transfer_gb_s=_number(
            eff.get("kv_transfer_gb_s", 100.0), "kv_transfer_gb_s", minimum=1e-6
        ),
        kv_transfer_latency_us=_number(
            eff.get("kv_transfer_latency_us", 0.0),
            "deployment.efficiency.kv_transfer_latency_us",
            maximum=MAX_STEP_US,
        ),
        memory_reserve_fraction=_number(mem.get("reserve_fraction", 0.1), "reserve_fraction"),
        attn_flops_per_ctx_token=_number(
            attn.get("flops_per_token_per_context_token", 0.0), "attention.flops"
        ),
        max_attended_tokens=(
            int(_number(max_attended, "attention.max_attended_tokens", integer=True, minimum=1))
            if max_attended is not None
            else None
        ),
        moe_weight_touch=bool(dep.get("moe_weight_touch", True)),
        eos_mean_tokens=int(
            _number(
                eos.get("mean_tokens", 256),
                "deployment.eos.mean_tokens",
                minimum=1,
                maximum=MAX_EOS_MEAN_TOKENS,
            )
        ),
        moe_comm_layers=int(
            _number(comm.get("moe_layers", 0), "moe_comm.moe_layers", integer=True)
        ),
        moe_comm_experts_per_token=int(
            _number(comm.get("experts_per_token", 0), "moe_comm.experts_per_token", integer=True)
        ),
        moe_comm_hidden=int(
            _number(comm.get("hidden_size", 0), "moe_comm.hidden_size", integer=True)
        ),
        moe_comm_bytes_per_element=_number(
            comm.get("bytes_per_element", 0.0), "moe_comm.bytes_per_element"
        ),
        moe_comm_link_gb_s=_number(comm.get("link_gb_s", 1.0), "moe_comm.link_gb_s", minimum=1e-6),
        moe_comm_efficiency=_number(
            comm.get("efficiency", 1.0), "moe_comm.efficiency", minimum=1e-6
        ),
        moe_comm_overlap=bool(comm.get("overlap", False)),
        spec_acceptance_by_kind=_kind_map(
            spec.get("acceptance_by_kind"), "deployment.speculative.acceptance_by_kind", maximum=1.0
        ),
        spec_default_mix=_kind_map(spec.get("default_mix"), "deployment.speculative.default_mix"),
        spec_position_decay=_number(
            spec.get("position_decay", 1.0), "deployment.speculative.position_decay"
        ),
        spec_verify_budget_tokens=int(
            _number(spec.get("verify_budget_tokens", 0), "speculative.verify_budget_tokens")
        ),
        gemm_routed_experts=int(
            _number(gemm.get("routed_experts", 0), "grouped_gemm.routed_experts", integer=True)
        ),
        gemm_experts_per_token=int(
            _number(
                gemm.get("experts_per_token", 0), "grouped_gemm.experts_per_token", integer=True
            )
        ),
        gemm_routed_share=_number(gemm.get("routed_share", 1.0), "grouped_gemm.routed_share"),
        gemm_efficiency=(
            _number(gemm["efficiency"], "grouped_gemm.efficiency", minimum=1e-6)
            if "efficiency" in gemm
            else None
        ),
        attention_dp=bool(attn.get("data_parallel", False)),
        gemm_half_tokens_per_expert=_number(
            gemm.get("half_efficiency_tokens_per_expert", 0.0),
            "grouped_gemm.half_efficiency_tokens_per_expert",
        ),
        ep_skew=_number(imb.get("expert_skew", 0.0), "load_imbalance.expert_skew"),
        ep_statistical=bool(imb.get("statistical", False)),
        sched_step_us=_number(
            sched.get("step_us", 0.0), "deployment.scheduler.step_us", maximum=MAX_STEP_US
        ),
        sched_per_sequence_us=_number(
            sched.get("per_sequence_us", 0.0),
            "deployment.scheduler.per_sequence_us",
            maximum=MAX_STEP_US,
        ),
        sched_per_token_us=_number(
            sched.get("per_token_us", 0.0),
            "deployment.scheduler.per_token_us",
            maximum=MAX_STEP_US,
        ),
        attn_flops_per_full_ctx_token=_number(
            attn.get("flops_per_token_per_full_context_token", 0.0), "attention.full_context"
        ),
        attn_efficiency=(
            _number(attn["efficiency"], "deployment.attention.efficiency", minimum=1e-6)
            if "efficiency" in attn
            else None
        ),
        power_tdp_w=sf("accelerator_power_w", 1e-9) if power else None,
        power_idle_fraction=_number(
            power.get("idle_fraction", 0.0), "deployment.power.idle_fraction"
        ),
        provenance=prov,
        open_parameters=_open_parameters(doc.get("open")),
        fit_from=_fit_from(doc),
        open_treatment=str((doc.get("open") or {}).get("treatment", "envelope")),
    )
    _validate(prof)
    return prof


def _fit_from(doc: dict[str, Any]) -> FitFrom | None:
    """``fit_from: {profile, reason, parameters: {this profile's path: the fitted path}}``:
    each named value of this profile is a share of the other profile's fitted value, so
    the other fit's ±1.96 σ samples move it by the same ratio (docs/simulator.md "Bands")."""
    raw = doc.get("fit_from")
    if raw is None:
        return None
    obj = _check_keys(raw, {"profile", "reason", "parameters"}, "fit_from")
    source = obj.get("profile")
    if not isinstance(source, str) or not source.strip():
        raise ProfileError("fit_from.profile: the name of the profile whose fit is borrowed")
    if source == doc.get("name"):
        raise ProfileError("fit_from.profile: a profile with its own fit needs no fit_from")
    if not str(obj.get("reason") or "").strip():
        raise ProfileError("fit_from.reason: say how this profile's values derive from the fit")
    params = obj.get("parameters")
    if not isinstance(params, dict) or not params:
        raise ProfileError("fit_from.parameters: a mapping of this profile's path → fitted path")
    pairs = []
    for own, fitted in params.items():
        where = f"fit_from.parameters.{own}"
        if not str(own).startswith("deployment.") or not isinstance(fitted, str):
            raise ProfileError(f"{where}: a deployment. path mapped to the fitted path")
        node = _dig(doc, str(own))
        if isinstance(node, bool) or not isinstance(node, int | float) or node <= 0:
            raise ProfileError(f"{where}: this profile has no positive number there")
        pairs.append((str(own), fitted))
    return FitFrom(source, str(obj["reason"]), tuple(pairs))


def _open_parameters(raw: Any) -> tuple[OpenParameter, ...]:
    """``open: {treatment, parameters: {path: {range: [low, high], reason, integer}}}``."""
    if raw is None:
        return ()
    obj = _check_keys(raw, {"treatment", "parameters"}, "open")
    if obj.get("treatment", "envelope") not in OPEN_TREATMENTS:
        raise ProfileError(f"open.treatment: one of {', '.join(OPEN_TREATMENTS)}")
    params = _check_keys(obj.get("parameters") or {}, set(obj.get("parameters") or {}), "open")
    out = []
    for path, spec in params.items():
        where = f"open.parameters.{path}"
        spec = _check_keys(spec, {"range", "reason", "integer", "choices"}, where)
        if not str(spec.get("reason") or "").strip():
            raise ProfileError(f"{where}.reason: say why the description leaves it open")
        if "choices" in spec:
            ch = spec["choices"]
            if not isinstance(ch, dict) or len(ch) < 2:
                raise ProfileError(f"{where}.choices: at least two named deployment patches")
            for name, patch in ch.items():
                if not isinstance(patch, dict):
                    raise ProfileError(f"{where}.choices.{name}: a merge patch of deployment")
            out.append(
                OpenParameter(
                    str(path),
                    0.0,
                    0.0,
                    str(spec["reason"]),
                    choices=tuple((str(k), dict(v)) for k, v in ch.items()),
                )
            )
            continue
        rng = spec.get("range")
        if not isinstance(rng, list) or len(rng) != 2:
            raise ProfileError(f"{where}.range: [low, high]")
        low, high = (_number(v, f"{where}.range") for v in rng)
        if not low < high:
            raise ProfileError(f"{where}.range: low must be below high")
        if not str(path).startswith(("deployment.", "catalog_overrides.")):
            raise ProfileError(f"{where}: a path under deployment. or catalog_overrides.")
        out.append(
            OpenParameter(str(path), low, high, str(spec["reason"]), bool(spec.get("integer")))
        )
    return tuple(out)


def _validate(p: Profile) -> None:
    if p.active_decode_b > p.total_params_b or p.active_prefill_b > p.total_params_b:
        raise ProfileError("model: active parameters exceed total parameters")
    if p.accelerators_used > p.accelerators_total:
        raise ProfileError(
            f"deployment uses {p.accelerators_used} accelerators but {p.systems} × "
            f"{p.system_slug} has {p.accelerators_total}"
        )
    for r in p.roles:
        if p.kv_capacity_tokens(r) <= 0:
            raise ProfileError(
                f"deployment.{r.role}: weights ({p.weight_bytes / 1e9:.0f} GB) do not fit in "
                f"{r.accelerators} × {p.memory_gb:g} GB after the memory reserve"
            )
    if p.spec_k and not 0.0 <= p.spec_acceptance <= 1.0:
        raise ProfileError("deployment.speculative.acceptance: between 0 and 1")
    if not 0.0 < p.spec_position_decay <= 1.0:
        raise ProfileError("deployment.speculative.position_decay: in (0, 1]")
    if p.power_idle_fraction > 1.0:
        raise ProfileError("deployment.power.idle_fraction: at most 1")
