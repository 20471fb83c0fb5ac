"""Distribution check: the deployment's next-token distributions against the reference
deployment's, along the same token sequences (docs/verification.md "quality_distribution").

The reference (``references/<model-slug>.json``, key ``distributions``) holds, for each
shipped text (``texts/``: code, prose, a tool call), the reference's token ids and its top-k
next-token log-probabilities at every position. The worker replays the same ids: for each
position ``i`` one completions request with ``prompt = ids[:i]``, one output token,
temperature 0 and ``logprobs = k`` (every OpenAI-compatible completions endpoint supports
that; llama.cpp reuses the cached prefix, so a text costs one token of compute per
position). The web side compares:

- **top-1 agreement**: the share of positions whose most likely token is the same;
- **mean KL divergence** KL(reference ‖ deployment) over a partition both sides can fill
  from top-k lists only (the *top-k overlap rule*): the reference's top-k tokens plus one
  "other" bucket. A reference token missing from the deployment's top-k gets an equal share
  of the deployment's unseen mass (1 − Σ its top-k), one more share staying in "other";
  "other" gets whatever the deployment has left. Both sides then sum to 1 on the same
  buckets, so the divergence is well defined and 0 only for equal distributions.

Thresholds depend on the deployment's precision class (`PRECISION_CLASSES`, reasoning in
docs/verification.md): an honest 8-bit or 4-bit deployment drifts a little from BF16, a
different model or broken kernels drift a lot.

Record a reference from a deployment you trust with ``python -m
runner.verification.reference record``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentperf.engine.transport import Clock, Exchange, RequestSpec, Transport

TEXTS_DIR = Path(__file__).resolve().parent / "texts"
TEXT_IDS = ("code", "prose", "tool_call")
TOP_K = 8
MAX_POSITIONS = 96  # per text: at most ~290 one-token requests per check
FLOOR = 1e-9
# Positions answered without log-probabilities (see collect_distributions) count as top-1
# disagreements; more than this share of them fails the check outright.
MAX_UNSCORED_SHARE = 0.10

# Weight precision (the config's model.weight_precision) → class; the thresholds of a class
# are what an honest deployment of that precision meets against a BF16/F32 reference.
PRECISION_CLASSES: dict[str, str] = {
    **{p: "full" for p in ("fp32", "bf16", "fp16", "gguf_f32", "gguf_f16")},
    **{p: "8bit" for p in ("fp8", "int8", "gguf_q8_0")},
    **{p: "6bit" for p in ("fp6",)},
    **{p: "4bit" for p in ("fp4", "nvfp4", "mxfp4", "int4", "gguf_q4_k_m", "gguf_q4_0")},
}
# (maximum mean KL in nats, minimum top-1 agreement)
THRESHOLDS: dict[str, tuple[float, float]] = {
    "full": (0.01, 0.97),
    "8bit": (0.03, 0.93),
    "6bit": (0.08, 0.88),
    "4bit": (0.20, 0.80),
}


def precision_class(weight_precision: str | None) -> str:
    """The class of a precision; an unknown one is held to the strictest class."""
    return PRECISION_CLASSES.get(str(weight_precision or ""), "full")


def reference_texts() -> dict[str, str]:
    return {tid: (TEXTS_DIR / f"{tid}.txt").read_text() for tid in TEXT_IDS}


def position_spec(model: str, text_id: str, tokens: Sequence[int], i: int) -> RequestSpec:
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(tokens[:i]),
        "max_tokens": 1,
        "temperature": 0,
        # an end-of-sequence token is a position's answer too: without this, some servers
        # end the stream with no token (and no log-probabilities) when EOS is most likely
        "ignore_eos": True,
        "logprobs": TOP_K,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return RequestSpec(
        request_id=f"dist-{text_id}-{i}",
        api="completions",
        body=body,
        target_output_tokens=1,
        timeout_s=60.0,
    )


def top_logprobs(ex: Exchange) -> list[tuple[str, float]] | None:
    """The first output position's top-k as [(token, logprob)], from either logprobs shape:
    the chat-style ``{"content": [{"top_logprobs": [{"token", "logprob"}]}]}`` (llama.cpp,
    newer servers) or the legacy completions ``{"top_logprobs": [{token: logprob}]}``."""
    for chunk in ex.extra.get("logprobs") or []:
        if not isinstance(chunk, dict):
            continue
        content = chunk.get("content")
        if isinstance(content, list) and content:
            tops = content[0].get("top_logprobs") if isinstance(content[0], dict) else None
            if tops:
                return [(str(t.get("token")), float(t.get("logprob"))) for t in tops]
        legacy = chunk.get("top_logprobs")
        if isinstance(legacy, list) and legacy and isinstance(legacy[0], dict):
            return [(str(k), float(v)) for k, v in legacy[0].items()]
    return None


async def collect_distributions(
    transport: Transport, clock: Clock, *, model: str, reference: dict[str, Any]
) -> dict[str, Any]:
    """The deployment's top-k at every position of the reference's token sequences."""
    texts = []
    for ref_text in (reference.get("distributions") or {}).get("texts") or []:
        tokens = [int(t) for t in ref_text.get("tokens") or []]
        positions: list[list[list[Any]] | None] = []
        error = ""
        for i in range(1, min(len(tokens), MAX_POSITIONS + 1)):
            ex = await transport.send(position_spec(model, str(ref_text["id"]), tokens, i))
            if not ex.ok:
                error = f"{ex.error_class}: {ex.error_detail[:200]}"
                break
            # None: answered without log-probabilities (llama.cpp withholds them when the
            # token is an incomplete UTF-8 piece); the comparison counts such positions
            tops = top_logprobs(ex)
            positions.append(None if tops is None else [[t, round(lp, 6)] for t, lp in tops])
        texts.append({"id": ref_text["id"], "positions": positions, "error": error})
    return {"top_k": TOP_K, "texts": texts}


def _probs(tops: Sequence[Sequence[Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for tok, lp in tops:
        out.setdefault(str(tok), math.exp(float(lp)))
    return out


def position_divergence(
    reference: Sequence[Sequence[Any]], candidate: Sequence[Sequence[Any]]
) -> tuple[float, bool]:
    """(KL(reference ‖ candidate) under the top-k overlap rule, same top-1 token)."""
    p = _probs(reference)
    q_top = _probs(candidate)
    unseen = max(0.0, 1.0 - sum(q_top.values()))
    missing = [t for t in p if t not in q_top]
    share = unseen / (len(missing) + 1)
    q = {t: q_top.get(t, share) for t in p}
    buckets = [(p[t], q[t]) for t in p]
    buckets.append((max(0.0, 1.0 - sum(p.values())), max(0.0, 1.0 - sum(q.values()))))
    kl = sum(pi * math.log(pi / max(qi, FLOOR)) for pi, qi in buckets if pi > 1e-12)
    same = bool(p and q_top) and max(p, key=p.__getitem__) == max(q_top, key=q_top.__getitem__)
    return max(0.0, kl), same


def compare_distributions(
    collected: dict[str, Any] | None, reference: dict[str, Any]
) -> dict[str, Any]:
    """Mean KL and top-1 agreement over every position both sides have, per text and all."""
    by_id = {t.get("id"): t for t in (collected or {}).get("texts") or []}
    per_text = []
    all_kl: list[float] = []
    all_same: list[bool] = []
    missing = 0
    unscored = 0
    for ref_text in (reference.get("distributions") or {}).get("texts") or []:
        got = by_id.get(ref_text.get("id")) or {}
        ref_positions = ref_text.get("positions") or []
        cand_positions = got.get("positions") or []
        kls, sames = [], []
        for ref_pos, cand_pos in zip(ref_positions, cand_positions, strict=False):
            if ref_pos is None:  # the reference itself has no distribution here
                continue
            if cand_pos is None:  # the deployment gave none where the reference did
                sames.append(False)
                unscored += 1
                continue
            kl, same = position_divergence(ref_pos, cand_pos)
            kls.append(kl)
            sames.append(same)
        missing += max(0, min(len(ref_positions), MAX_POSITIONS) - len(cand_positions))
        all_kl += kls
        all_same += sames
        per_text.append(
            {
                "id": ref_text.get("id"),
                "positions": len(sames),
                "mean_kl": round(sum(kls) / len(kls), 6) if kls else None,
                "top1_agreement": round(sum(sames) / len(sames), 4) if sames else None,
                "error": got.get("error", "") if got else "not collected",
            }
        )
    ordered = sorted(all_kl)
    return {
        "positions": len(all_same),
        "missing_positions": missing,
        "unscored_positions": unscored,
        "mean_kl": round(sum(all_kl) / len(all_kl), 6) if all_kl else None,
        "p95_kl": round(ordered[int(0.95 * (len(ordered) - 1))], 6) if ordered else None,
        "top1_agreement": round(sum(all_same) / len(all_same), 4) if all_same else None,
        "texts": per_text,
    }


def distribution_verdict(
    compared: dict[str, Any], *, weight_precision: str | None
) -> tuple[str, str, dict[str, Any]]:
    """("pass"|"fail", summary, thresholds) for the compared figures and the precision."""
    klass = precision_class(weight_precision)
    max_kl, min_top1 = THRESHOLDS[klass]
    limits = {
        "precision": weight_precision,
        "class": klass,
        "max_mean_kl": max_kl,
        "min_top1_agreement": min_top1,
    }
    kl, top1 = compared.get("mean_kl"), compared.get("top1_agreement")
    if kl is None or top1 is None or compared.get("missing_positions"):
        return "fail", "the deployment did not answer every position of the reference texts", limits
    if compared.get("unscored_positions", 0) > MAX_UNSCORED_SHARE * max(1, compared["positions"]):
        return (
            "fail",
            (
                f"{compared['unscored_positions']} of {compared['positions']} positions came "
                "without log-probabilities where the reference has them"
            ),
            limits,
        )
    figures = (
        f"mean KL {kl:.4f} nats, top-1 agreement {top1:.1%} over {compared['positions']} positions"
    )
    if kl <= max_kl and top1 >= min_top1:
        return "pass", f"{figures}: within the {klass} limits", limits
    return (
        "fail",
        (
            f"{figures}: outside the {klass} limits (KL ≤ {max_kl}, top-1 ≥ {min_top1:.0%}); "
            "another model, or a degraded deployment"
        ),
        limits,
    )
