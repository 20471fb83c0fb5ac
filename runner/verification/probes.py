"""Qualification probes, run by the pool worker before any load (no database access).

Each probe sends a few requests through the engine's Transport (so the same code checks a
real endpoint and the simulator on virtual time) and returns a check:
``{"name", "status": "pass"|"warn"|"fail", "summary", "fatal", "evidence"}``. A failed
fatal probe stops the run before load: measuring a deployment that does not serve the
claimed model, does not stream or ignores the requested output length would publish
numbers that mean nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentperf.engine.transport import Clock, Exchange, RequestSpec, Transport
from agentperf.verification.status import FAIL, PASS, WARN

EXACT_LENGTHS = (1, 17, 64)
# About 600 cl100k tokens of stable text: long enough to fill several KV blocks.
CACHE_PROBE_TEXT = (
    "You are a careful coding agent working in a large repository. Read the task, plan, "
    "then change the smallest amount of code that solves it and run the tests. "
) * 18


def check(
    name: str, status: str, summary: str, *, fatal: bool, evidence: dict[str, Any]
) -> dict[str, Any]:
    return {
        "name": name,
        "status": status,
        "summary": summary,
        "fatal": fatal,
        "evidence": evidence,
    }


def _spec(model: str, rid: str, content: str, target: int, system: str = "") -> RequestSpec:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": content})
    return RequestSpec(
        request_id=rid,
        api="chat",
        body={
            "model": model,
            "messages": messages,
            "max_tokens": target,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        target_output_tokens=target,
        timeout_s=120.0,
    )


def _brief(ex: Exchange) -> dict[str, Any]:
    return {
        "ok": ex.ok,
        "error": ex.error_class,
        "detail": ex.error_detail[:200],
        "http_status": ex.http_status,
        "prompt_tokens": ex.prompt_tokens,
        "completion_tokens": ex.completion_tokens,
        "cached_tokens": ex.cached_tokens,
        "output_events": ex.n_output_events,
        "reads": ex.n_reads,
    }


def model_listed_check(served_model_name: str, models: Sequence[str] | None) -> dict[str, Any]:
    """The claimed model is in `/v1/models` (None: served in process by the simulator)."""
    if models is None:
        return check(
            "model_listed",
            PASS,
            f"{served_model_name} is served by the in-process simulator",
            fatal=True,
            evidence={"models": [served_model_name], "in_process": True},
        )
    if served_model_name in models:
        return check(
            "model_listed",
            PASS,
            f"{served_model_name} is listed by /v1/models",
            fatal=True,
            evidence={"models": list(models)[:20]},
        )
    return check(
        "model_listed",
        FAIL,
        f"{served_model_name} is not among the served models {list(models)[:10]}",
        fatal=True,
        evidence={"models": list(models)[:20]},
    )


async def run_probes(transport: Transport, clock: Clock, *, model: str) -> list[dict[str, Any]]:
    """Streaming, exact output length with ignore_eos, usage and cached-token reporting."""
    checks: list[dict[str, Any]] = []
    # streaming + exact lengths
    exchanges = []
    for n in EXACT_LENGTHS:
        exchanges.append(await transport.send(_spec(model, f"probe-len-{n}", "Write a parser.", n)))
    long = exchanges[-1]
    streamed = long.ok and long.n_output_events > 1
    checks.append(
        check(
            "streaming",
            PASS if streamed else FAIL,
            f"a {EXACT_LENGTHS[-1]}-token answer arrived in {long.n_output_events} output events"
            if long.ok
            else f"the probe request failed: {long.error_class} {long.error_detail[:120]}",
            fatal=True,
            evidence=_brief(long),
        )
    )
    got = [ex.completion_tokens for ex in exchanges]
    exact = all(ex.ok for ex in exchanges) and got == list(EXACT_LENGTHS)
    checks.append(
        check(
            "exact_output_length",
            PASS if exact else FAIL,
            f"asked for {list(EXACT_LENGTHS)} tokens with ignore_eos, got {got}",
            fatal=True,
            evidence={"targets": list(EXACT_LENGTHS), "requests": [_brief(e) for e in exchanges]},
        )
    )
    usage = all(ex.prompt_tokens and ex.completion_tokens is not None for ex in exchanges)
    checks.append(
        check(
            "usage_reported",
            PASS if usage else FAIL,
            "usage.prompt_tokens and usage.completion_tokens are reported"
            if usage
            else "the stream did not report usage (stream_options.include_usage)",
            fatal=True,
            evidence={"requests": [_brief(e) for e in exchanges]},
        )
    )
    # cached tokens: the same system prompt twice; the second should hit the prefix cache
    first = await transport.send(_spec(model, "probe-cache-1", "Go.", 4, CACHE_PROBE_TEXT))
    second = await transport.send(_spec(model, "probe-cache-2", "Next.", 4, CACHE_PROBE_TEXT))
    cached = second.cached_tokens
    if not second.ok:
        status, summary = FAIL, f"the cache probe failed: {second.error_class}"
    elif cached is None:
        status, summary = (
            FAIL,
            (
                "usage.prompt_tokens_details.cached_tokens is not reported on a repeated prefix: "
                "start vLLM with --enable-prompt-tokens-details, SGLang with --enable-cache-report "
                "(SGLang omits the field on a cache miss, so it is read on the repeat)"
            ),
        )
    elif cached <= 0:
        status, summary = (
            WARN,
            (
                "cached_tokens is reported but 0 for a repeated prefix (is prefix caching on? "
                "vLLM --enable-prefix-caching, SGLang without --disable-radix-cache)"
            ),
        )
    else:
        status = PASS
        summary = f"{cached} of {second.prompt_tokens} prompt tokens reported cached on repeat"
    checks.append(
        check(
            "cached_tokens_reported",
            status,
            summary,
            fatal=False,
            evidence={"first": _brief(first), "second": _brief(second)},
        )
    )
    return checks


IGNORE_EOS_TOKENS = 24
IGNORE_EOS_PROMPT = "Answer with exactly one word and nothing else: what colour is the sky?"
REASONING_PROMPT = "Think it through, then answer: what is 17 + 25?"


async def ignore_eos_probe(transport: Transport, *, model: str) -> dict[str, Any]:
    """A question whose natural answer is one word, asked for 24 tokens with ignore_eos."""
    ex = await transport.send(
        _spec(model, "probe-ignore-eos", IGNORE_EOS_PROMPT, IGNORE_EOS_TOKENS)
    )
    ok = ex.ok and ex.completion_tokens == IGNORE_EOS_TOKENS
    return check(
        "ignore_eos",
        PASS if ok else FAIL,
        f"a one-word question asked for {IGNORE_EOS_TOKENS} tokens with ignore_eos got "
        f"{ex.completion_tokens} (finish_reason {ex.finish_reason!r})"
        + (
            ""
            if ok
            else ": the server stops at end-of-sequence, so output lengths are not "
            "forced (vLLM/SGLang honour ignore_eos; others need min_tokens)"
        ),
        fatal=True,
        evidence={**_brief(ex), "finish_reason": ex.finish_reason, "text": ex.content[:200]},
    )


def longest_turn(dataset: Any) -> tuple[Any, int, int] | None:
    """(trajectory, turn index, local prompt tokens) of the dataset's longest prompt."""
    best: tuple[Any, int, int] | None = None
    for trajectory in dataset.trajectories:
        for k, size in enumerate(trajectory.prompt_tokens()):
            if size is not None and (best is None or size > best[2]):
                best = (trajectory, k, size)
    return best


async def context_probe(
    transport: Transport, *, model: str, dataset: Any, max_model_len: int | None = None
) -> dict[str, Any]:
    """The dataset's longest prompt, sent as the replay sends it, with its full output."""
    from agentperf.engine.replay import ReplayConfig, build_request

    found = longest_turn(dataset)
    if found is None:
        return check(
            "context_fits",
            WARN,
            "the dataset has no prompt sizes to check",
            fatal=False,
            evidence={},
        )
    trajectory, k, local = found
    spec = build_request(
        trajectory,
        k,
        ReplayConfig(model=model, count_output_tokens=False),
        request_id="probe-context",
        namespace="agentperf-session 00000000probe00\n",
    )
    spec.timeout_s = 600.0
    ex = await transport.send(spec)
    target = spec.target_output_tokens
    evidence = {
        **_brief(ex),
        "trajectory": trajectory.id,
        "turn": k,
        "local_prompt_tokens": local,
        "target_output_tokens": target,
        "max_model_len": max_model_len,
    }
    if ex.ok:
        return check(
            "context_fits",
            PASS,
            f"the longest prompt ({ex.prompt_tokens} tokens served, {local} local) with its "
            f"{target}-token answer was served"
            + (f"; max_model_len {max_model_len}" if max_model_len else ""),
            fatal=True,
            evidence=evidence,
        )
    return check(
        "context_fits",
        FAIL,
        f"the dataset's longest prompt ({local} local tokens + {target} output) was refused: "
        f"{ex.error_class} {ex.error_detail[:160]}",
        fatal=True,
        evidence=evidence,
    )


async def reasoning_probe(transport: Transport, *, model: str) -> dict[str, Any]:
    """Where the server streams reasoning: `reasoning_content` (vLLM < 0.10, SGLang, DeepSeek)
    or `reasoning` (vLLM >= 0.10, OpenRouter); the client reads either."""
    ex = await transport.send(_spec(model, "probe-reasoning", REASONING_PROMPT, 32))
    field = ex.extra.get("reasoning_field")
    evidence = {
        **_brief(ex),
        "reasoning_field": field,
        "reasoning_chars": len(ex.reasoning),
        "content_chars": len(ex.content),
    }
    if not ex.ok:
        return check(
            "reasoning_read",
            FAIL,
            f"the probe failed: {ex.error_class}",
            fatal=False,
            evidence=evidence,
        )
    summary = (
        f"reasoning text streamed in `{field}` and read ({len(ex.reasoning)} chars)"
        if field
        else "no reasoning text in this answer (the model answered in content); both "
        "`reasoning` and `reasoning_content` would be read"
    )
    return check("reasoning_read", PASS, summary, fatal=False, evidence=evidence)


async def canary_probe(transport: Transport, clock: Clock, *, model: str) -> dict[str, Any]:
    """Greedy answers to the canary prompts; the report compares them with the reference."""
    from agentperf.verification.fingerprint import collect_canaries

    collected = await collect_canaries(transport, clock, model=model)
    failed = [c["id"] for c in collected["canaries"] if not c["ok"]]
    return check(
        "canary_outputs",
        FAIL if failed else PASS,
        f"canaries failed: {failed}"
        if failed
        else f"{len(collected['canaries'])} greedy canary answers recorded"
        + (" with top-k logprobs" if collected["logprobs"] else " (no logprobs)"),
        fatal=False,
        evidence=collected,
    )


async def distribution_probe(
    transport: Transport, clock: Clock, *, model: str, reference: dict[str, Any]
) -> dict[str, Any]:
    """Top-k next-token distributions along the reference's token sequences; the report
    compares them with the reference (docs/verification.md "quality_distribution")."""
    from agentperf.verification.quality import collect_distributions

    collected = await collect_distributions(transport, clock, model=model, reference=reference)
    errors = [f"{t['id']}: {t['error']}" for t in collected["texts"] if t["error"]]
    positions = sum(len(t["positions"]) for t in collected["texts"])
    return check(
        "next_token_distributions",
        FAIL if errors else PASS,
        "; ".join(errors)
        if errors
        else f"top-{collected['top_k']} distributions at {positions} positions of "
        f"{len(collected['texts'])} reference texts",
        fatal=False,
        evidence=collected,
    )


async def extended_probes(
    transport: Transport,
    clock: Clock,
    *,
    model: str,
    dataset: Any = None,
    max_model_len: int | None = None,
) -> list[dict[str, Any]]:
    """The probes beyond the basic ones: ignore_eos, context, reasoning, canaries."""
    checks = [await ignore_eos_probe(transport, model=model)]
    if dataset is not None:
        checks.append(
            await context_probe(
                transport, model=model, dataset=dataset, max_model_len=max_model_len
            )
        )
    checks.append(await reasoning_probe(transport, model=model))
    checks.append(await canary_probe(transport, clock, model=model))
    return checks


def fatal_failures(checks: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in checks if c["fatal"] and c["status"] == FAIL]
