"""What a loaded simulator profile is (``Profile``): the figures and deployment the twin
simulates, with the quantities derived from them (docs/simulator.md "The model").

A profile is loaded from its YAML document by ``agentperf.simulator.profile``; the
document's own shape is ``agentperf.simulator.profile_schema``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# fp4/fp8/bf16: accelerator peaks; f32, q8_0, q4_0, q4_1: llama.cpp GGUF types (CPU profiles,
# docs/simulator.md "Hold-out")
PRECISIONS = ("fp4", "fp8", "bf16", "f32", "q8_0", "q4_0", "q4_1")
MODES = ("aggregated", "disaggregated")
# Kinds of output text a turn's metadata may name (``output_kind``); acceptance of
# speculative drafts depends on them (docs/simulator.md "Speculative decoding").
OUTPUT_KINDS = ("tool_call", "code", "prose")
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
    """A loaded profile: the system's and the model's figures and the deployment, flat, as
    the cost model and the scheduler read them; ``provenance`` names each one's source."""

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
