"""Closed-form views of a profile: resolved parameters, single-agent speed, capacities.

These use the same CostModel as the simulation (no separate formulas), evaluated at a
steady state, so ``python -m runner.simulator show --profile P`` tells a vendor what a
profile implies before any run.
"""

from __future__ import annotations

from typing import Any

from runner.simulator.model import CostModel
from runner.simulator.profile import Profile


def decode_step_seconds(profile: Profile, *, batch: int, context: int) -> float:
    """One decode iteration of ``batch`` sequences of ``context`` tokens on a decode replica."""
    role = profile.roles[-1]
    cm = CostModel(profile, role)
    k1 = profile.spec_k + 1
    return cm.cost(
        prefill_tokens=0,
        prefill_attended=0.0,
        prefill_ctx_read=0,
        decode_seqs=batch,
        verify=k1,
        decode_ctx=batch * context,
        decode_attended=batch * cm.attended(context),
        drafting=profile.spec_k > 0,
    ).seconds


def single_agent_speed(profile: Profile, *, context: int) -> float:
    """Expected output tok/s of one agent alone at ``context`` tokens of context."""
    return profile.spec_tokens_per_step / decode_step_seconds(profile, batch=1, context=context)


def decode_batch_for_speed(profile: Profile, speed: float, *, context: int) -> int | None:
    """Smallest number of sequences decoding together at which each gets at most ``speed``
    tok/s (None if a decode replica's ``max_batch`` is still faster)."""
    role = profile.roles[-1]

    def per_sequence(batch: int) -> float:
        step = decode_step_seconds(profile, batch=batch, context=context)
        return profile.spec_tokens_per_step / step

    if per_sequence(role.max_batch) > speed:
        return None
    lo, hi = 1, role.max_batch
    while lo < hi:
        mid = (lo + hi) // 2
        if per_sequence(mid) > speed:
            lo = mid + 1
        else:
            hi = mid
    return lo


def describe(profile: Profile) -> dict[str, Any]:
    return {
        "name": profile.name,
        "label": profile.label,
        "system": profile.system_slug,
        "model": profile.model_slug,
        "mode": profile.mode,
        "accelerators_used": profile.accelerators_used,
        "accelerators_total": profile.accelerators_total,
        "roles": [
            {
                "role": r.role,
                "replicas": r.replicas,
                "accelerators": r.accelerators,
                "max_batch": r.max_batch,
                "chunk_tokens": r.chunk_tokens,
                "kv_capacity_tokens": profile.kv_capacity_tokens(r),
            }
            for r in profile.roles
        ],
        "weight_gb": profile.weight_bytes / 1e9,
        "spec_tokens_per_step": profile.spec_tokens_per_step,
        "single_agent_tok_s_at_27k": single_agent_speed(profile, context=27_000),
        # how large a decode batch must be before agents slow to the public 82 tok/s point
        "decode_batch_for_82_tok_s_at_27k": decode_batch_for_speed(profile, 82.0, context=27_000),
        "provenance": profile.provenance,
    }
