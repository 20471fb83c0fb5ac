"""The cost model: the duration of one batch iteration of one replica (``CostModel``).

Each iteration (see docs/simulator.md for the equations and sources):

    compute  = 2·P_prefill·n_prefill + 2·P_decode·n_decode·(k+1) + a·Σ attended context
    memory   = weight bytes touched + kv_bytes_per_token · Σ context of the batch
    duration = max(compute / (peak FLOP/s · η_c), memory / (HBM B/s · η_b))
               + iteration overhead + k · draft step

The scheduler (``agentperf.simulator.scheduler``) sums an iteration's work and asks ``cost``
for its duration; nothing here holds state between iterations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agentperf.simulator.profile_types import Profile, RoleConfig


@dataclass(slots=True, frozen=True)
class IterationCost:
    """Cost terms of one iteration, kept for tests and docs."""

    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    seconds: float
    comm_s: float = 0.0  # expert-parallel all-to-all
    gemm_efficiency: float = 1.0  # grouped-GEMM factor g(m) at this iteration's tokens
    imbalance: float = 1.0  # busiest expert-parallel rank ÷ the mean
    sched_s: float = 0.0  # scheduler, sampling and output processing
    utilisation: float = 0.0  # share of the iteration the chips compute or stream memory


class CostModel:
    """Duration of one iteration of one replica (``accelerators`` pooled).

    The terms, their equations and sources: docs/simulator.md "The model".
    """

    def __init__(self, profile: Profile, role: RoleConfig) -> None:
        p = profile
        self.pp = p.active_prefill_b * 1e9
        self.pd = p.active_decode_b * 1e9
        self.ptot = p.total_params_b * 1e9
        self.bpp = p.weight_bits / 8.0
        self.kvb = p.kv_bytes_per_token
        self.flops = p.peak_tflops * 1e12 * role.accelerators * p.compute_efficiency
        # routed-expert grouped GEMMs (data-parallel attention layout only): their own peak share
        g_eff = p.gemm_efficiency if p.gemm_efficiency is not None else p.compute_efficiency
        self.routed_flops = p.peak_tflops * 1e12 * role.accelerators * g_eff
        attn_eff = p.compute_efficiency if p.attn_efficiency is None else p.attn_efficiency
        self.attn_rate = p.peak_tflops * 1e12 * role.accelerators * attn_eff
        self.bw = p.hbm_tb_s * 1e12 * role.accelerators * p.bandwidth_efficiency
        self.overhead_s = p.iteration_overhead_us * 1e-6
        self.draft_s = p.draft_step_us * 1e-6
        self.attn = p.attn_flops_per_ctx_token
        self.attn_full = p.attn_flops_per_full_ctx_token
        self.window = p.max_attended_tokens
        self.moe = p.moe_weight_touch and self.pd < self.ptot
        # A mean-field slice (RoleConfig.mean_field, docs/simulator.md "Mean-field trials"):
        # the terms pooled over the expert-parallel group see the whole replica's tokens,
        # s times the slice's, and its weights are read by s times the slice's bandwidth.
        self.scale = role.mean_field
        self.frac = self.pd / self.ptot
        # Expert-parallel all-to-all: each token's hidden state goes to its experts on other
        # GPUs and comes back, every MoE layer; the group's GPUs send in parallel over their
        # own links, so the time is per-GPU bytes over one GPU's link rate.
        link = p.moe_comm_link_gb_s * 1e9 * p.moe_comm_efficiency
        self.comm_s_per_token = p.moe_comm_bytes_per_token(role.ep) / (role.accelerators * link)
        self.comm_overlap = p.moe_comm_overlap
        # Grouped GEMM: efficiency m / (m + m_half) at m tokens per active expert.
        self.n_exp = p.gemm_routed_experts
        self.e_tok = p.gemm_experts_per_token or p.moe_comm_experts_per_token
        self.m_half = p.gemm_half_tokens_per_expert if self.n_exp and self.e_tok else 0.0
        # Expert-parallel load imbalance over the EP ranks.
        self.ep = role.ep
        self.skew = p.ep_skew
        self.statistical = p.ep_statistical and role.ep > 1 and self.e_tok > 0
        self.log_ep2 = 2.0 * np.log(role.ep) if role.ep > 1 else 0.0
        # Scheduler / sampling / output processing: each data-parallel rank handles its share.
        self.dp = role.dp
        self.sched_step_s = p.sched_step_us * 1e-6
        self.sched_seq_s = p.sched_per_sequence_us * 1e-6
        self.sched_tok_s = p.sched_per_token_us * 1e-6
        # Data-parallel attention (docs/simulator.md "Data-parallel ranks"): attention, the
        # non-routed layers and KV reads of a sequence run on its rank (tp GPUs); the
        # routed-expert GEMMs and the all-to-all stay pooled over the EP group.
        self.dp_attention = p.attention_dp and role.dp > 1
        share = p.gemm_routed_share if self.dp_attention else 1.0
        self.routed = share
        self.dense_pf = 2.0 * self.pp * (1.0 - share)  # FLOPs per prefill token, per rank
        self.dense_dec = 2.0 * self.pd * (1.0 - share)  # FLOPs per verify token, per rank
        tp = max(1, role.tp)
        self.rank_rate = p.peak_tflops * 1e12 * tp * p.compute_efficiency
        self.rank_attn_rate = p.peak_tflops * 1e12 * tp * attn_eff
        self.rank_bw = p.hbm_tb_s * 1e12 * tp * p.bandwidth_efficiency

    def rank_seconds(
        self, *, tokens: Any, attended: Any, full_attended: Any, ctx_read: Any, prefill: bool
    ) -> Any:
        """Time on its data-parallel rank of the non-routed work of a sequence (arrays or
        floats): dense FLOPs per token + attention FLOPs, plus its KV bytes read."""
        dense = self.dense_pf if prefill else self.dense_dec
        return (
            tokens * dense / self.rank_rate
            + (self.attn * attended + self.attn_full * full_attended) / self.rank_attn_rate
            + self.kvb * ctx_read / self.rank_bw
        )

    def weight_bytes(self, tokens: int) -> float:
        """Weights read by an iteration of ``tokens`` tokens (MoE: more experts as T grows)."""
        if tokens <= 0:
            return 0.0
        if not self.moe:
            return self.pd * self.bpp
        touched = self.pd + (self.ptot - self.pd) * (1.0 - (1.0 - self.frac) ** (tokens - 1))
        return touched * self.bpp

    def gemm_efficiency(self, tokens: int) -> float:
        """g(T) = m / (m + m_half), m = T·E / N_active(T) tokens per expert that has any,
        N_active = N·(1 − (1 − E/N)^T): small per-expert batches run far below peak."""
        if not self.m_half or tokens <= 0:
            return 1.0
        n, e = self.n_exp, self.e_tok
        active = n * (1.0 - (1.0 - e / n) ** tokens)
        m = tokens * e / max(active, 1.0)
        return m / (m + self.m_half)

    def imbalance(self, tokens: int) -> float:
        """Busiest EP rank's expert work ÷ the mean: (1 + skew) · (1 + √(2 ln EP / λ)),
        λ = T·E/EP token-expert pairs per rank (the max of EP Poisson loads), at most EP."""
        f = 1.0 + self.skew
        if self.statistical and tokens > 0:
            lam = tokens * self.e_tok / self.ep
            f *= 1.0 + (self.log_ep2 / lam) ** 0.5
        return min(f, float(self.ep)) if self.ep > 1 else 1.0

    def cost(
        self,
        *,
        prefill_tokens: int,
        prefill_attended: float,
        prefill_ctx_read: int,
        decode_seqs: int,
        verify: int,
        decode_ctx: int,
        decode_attended: float,
        drafting: bool,
        prefill_full_attended: float = 0.0,
        prefill_seqs: int = 0,
        rank_s: float | None = None,
    ) -> IterationCost:
        """One iteration's duration. ``rank_s``: the busiest data-parallel rank's time for
        its non-routed work (``rank_seconds`` summed per rank), with ``dp_attention``;
        without it that work is pooled over the replica's accelerators."""
        tokens = prefill_tokens + decode_seqs * verify
        gemm = 2.0 * self.pp * prefill_tokens + 2.0 * self.pd * decode_seqs * verify
        attn = self.attn * (prefill_attended + verify * decode_attended) + self.attn_full * (
            prefill_full_attended + verify * decode_ctx
        )
        flops = gemm + attn
        kv = self.kvb * (decode_ctx + prefill_ctx_read)
        s = self.scale  # 1 for a whole replica: the same floats (x / 1 is x)
        nbytes = self.weight_bytes(tokens * s) / s + kv
        g = self.gemm_efficiency(tokens * s)
        imb = self.imbalance(tokens * s)
        comm = self.comm_s_per_token * tokens * imb
        if self.dp_attention:
            if rank_s is None:  # no per-rank split given: the work spread evenly
                rank_s = self.rank_seconds(
                    tokens=(prefill_tokens + decode_seqs * verify) / self.dp,
                    attended=(prefill_attended + verify * decode_attended) / self.dp,
                    full_attended=(prefill_full_attended + verify * decode_ctx) / self.dp,
                    ctx_read=(decode_ctx + prefill_ctx_read) / self.dp,
                    prefill=False,
                )
            c = gemm * self.routed * imb / (self.routed_flops * g)
            m = (nbytes - kv) / self.bw
            core = max(c, m) + rank_s
        else:
            if self.attn_rate == self.flops:
                c = (gemm * imb / g + attn) / self.flops
            else:
                c = gemm * imb / (self.flops * g) + attn / self.attn_rate
            m = nbytes / self.bw
            core = max(c, m)
        busy = max(core, comm) if self.comm_overlap else core + comm
        sched = (
            self.sched_step_s
            + self.sched_seq_s * (decode_seqs + prefill_seqs) / self.dp
            + self.sched_tok_s * tokens / self.dp
            if tokens
            else 0.0
        )
        seconds = (
            busy + self.overhead_s + sched + (self.draft_s * (verify - 1) if drafting else 0.0)
        )
        return IterationCost(
            flops=flops,
            bytes=nbytes,
            compute_s=c,
            memory_s=m,
            seconds=seconds,
            comm_s=comm,
            gemm_efficiency=g,
            imbalance=imb,
            sched_s=sched,
            utilisation=min(1.0, core / seconds) if seconds > 0 else 0.0,
        )

    def attended(self, ctx: int) -> float:
        return float(ctx if self.window is None else min(ctx, self.window))
