"""Speculative decoding and server counters: settings that fake acceptance, and the
acceptance and prefix-cache figures from ``/metrics`` deltas over a measurement window.

No Django here: the submission schema calls ``fake_acceptance_findings`` at validation, the
worker calls ``parse_metrics`` on its window scrapes, and the verification report reads
the deltas.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from agentperf.httpget import Connect, http_get

# Settings that make an engine accept draft tokens without verifying them (benchmark-only
# switches): the output is no longer the model's, the speed is not real.
FAKE_ACCEPTANCE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "vLLM rejection_sample_method: synthetic",
        re.compile(r"rejection[_-]sample[_-]method\W{0,6}synthetic", re.I),
    ),
    (
        "vLLM synthetic_acceptance_length / _rate",
        re.compile(r"synthetic[_-]acceptance[_-](length|rate)", re.I),
    ),
    ("SGLang SGLANG_SIMULATE_ACC_LEN", re.compile(r"SIMULATE[_-]ACC[_-](LEN|RATE)", re.I)),
    (
        "TensorRT-LLM TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS",
        re.compile(r"FORCE[_-]NUM[_-]ACCEPTED[_-]TOKENS", re.I),
    ),
    ("forced / fake draft acceptance", re.compile(r"(force|fake|mock)[_-]?accept", re.I)),
)
# Where in a deployment config settings can hide; `notes` is prose and is not searched.
_SKIP_KEYS = {"notes"}

# Counter names per engine (a trailing `_total` is ignored when matching).
VLLM_DRAFTS = "vllm:spec_decode_num_drafts"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
VLLM_CACHE_QUERIES = "vllm:prefix_cache_queries"
VLLM_CACHE_HITS = "vllm:prefix_cache_hits"
SGLANG_ACCEPT_LENGTH = "sglang:spec_accept_length"  # gauge: mean accepted length
SGLANG_CACHE_HIT_RATE = "sglang:cache_hit_rate"  # gauge
SIM_ACCELERATORS = "sim:accelerators_used"
# gauges: a level, not a count (a window reads the value at its end; several servers' levels
# are averaged, never added)
GAUGES = frozenset({SGLANG_ACCEPT_LENGTH, SGLANG_CACHE_HIT_RATE, SIM_ACCELERATORS})
# sim:modelled_*: the simulator's modelled power (runner/telemetry/modelled.py), read only
# for runs whose launcher is the simulator.
KEPT_PREFIXES = (
    "vllm:spec_decode",
    "vllm:prefix_cache",
    "sglang:spec",
    "sglang:cache",
    "trtllm:",
    "sim:accelerators",
    "sim:modelled",
    # llama.cpp's prompt tokens processed and taken from its cache (engine.cachetruth)
    "llamacpp:prompt_tokens_total",
    "llamacpp:prompt_tokens_cached",
)

# An acceptance rate this high over this many draft tokens is not a drafter guessing text.
IMPLAUSIBLE_RATE = 0.98
IMPLAUSIBLE_MIN_DRAFT_TOKENS = 500


def _walk(obj: Any, path: str = "") -> Iterable[tuple[str, str]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            if str(key) in _SKIP_KEYS and not path:
                continue
            sub = f"{path}.{key}" if path else str(key)
            yield sub, str(key)
            if isinstance(value, dict | list):
                yield from _walk(value, sub)
            elif value is not None:
                yield sub, f"{key}={value}" if not isinstance(value, bool) else str(key)
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _walk(value, f"{path}.{i}")
            if not isinstance(value, dict | list) and value is not None:
                yield f"{path}.{i}", str(value)
    # scalars are yielded by their parent


def fake_acceptance_findings(config: dict[str, Any]) -> list[dict[str, str]]:
    """Every place in a deployment config (env, launch args, launcher command, engine
    settings) that fakes speculative acceptance: [{"path", "setting", "text"}]."""
    found: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for path, text in _walk(config):
        for label, pattern in FAKE_ACCEPTANCE_PATTERNS:
            if pattern.search(text) and (path, label) not in seen:
                seen.add((path, label))
                found.append({"path": path, "setting": label, "text": text[:200]})
                break
    return found


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text (or TensorRT-LLM's JSON iteration stats) → {name: value}, summed over
    label sets, `_total` stripped; only the counters verification reads are kept."""
    text = text.strip()
    out: dict[str, float] = {}
    if text.startswith("["):
        return _trtllm_stats(text)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not match:
            continue
        name = match.group(1)
        if not name.startswith(KEPT_PREFIXES):
            continue
        name = name.removesuffix("_total")
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if math.isnan(value):
            continue
        out[name] = out.get(name, 0.0) + value
    return out


def _trtllm_stats(text: str) -> dict[str, float]:
    """TensorRT-LLM's /metrics: a JSON list of iteration stats with specDecodingStats."""
    try:
        rows = json.loads(text)
    except ValueError:
        return {}
    drafts = draft_tokens = accepted = 0.0
    for row in rows if isinstance(rows, list) else []:
        spec = (row or {}).get("specDecodingStats") or {}
        draft_tokens += float(spec.get("numDraftTokens") or 0)
        accepted += float(spec.get("numAcceptedTokens") or 0)
        drafts += float(spec.get("numRequestsWithDraftTokens") or 0)
    if not draft_tokens:
        return {}
    return {
        "trtllm:spec_decode_num_drafts": drafts,
        "trtllm:spec_decode_num_draft_tokens": draft_tokens,
        "trtllm:spec_decode_num_accepted_tokens": accepted,
    }


def scrape_metrics(
    base_url: str,
    *,
    api_key: str | None = None,
    timeout_s: float = 10.0,
    connect: Connect | None = None,
) -> str:
    """GET the server's /metrics (``base_url`` may end in /v1); through `connect` for a
    sandboxed server."""
    root = base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = http_get(root + "/metrics", timeout_s=timeout_s, headers=headers, connect=connect)
    return body.decode("utf-8", "replace")


def window_delta(start: dict[str, float], end: dict[str, float]) -> dict[str, float]:
    """Counter deltas end − start (gauges: the value at the end)."""
    out: dict[str, float] = {}
    for name, value in end.items():
        if name in GAUGES:
            out[name] = value
        else:
            out[name] = value - start.get(name, 0.0)
    return out


def spec_figures(delta: dict[str, float]) -> dict[str, Any] | None:
    """Acceptance rate = Δaccepted / Δdraft tokens; mean acceptance length = 1 + Δaccepted /
    Δdrafts (tokens per verification step); None when no draft was made."""
    for engine in ("vllm", "trtllm"):
        drafts = delta.get(f"{engine}:spec_decode_num_drafts", 0.0)
        tokens = delta.get(f"{engine}:spec_decode_num_draft_tokens", 0.0)
        accepted = delta.get(f"{engine}:spec_decode_num_accepted_tokens", 0.0)
        if tokens > 0:
            return {
                "source": engine,
                "drafts": drafts,
                "draft_tokens": tokens,
                "accepted_tokens": accepted,
                "acceptance_rate": accepted / tokens,
                "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
            }
    if delta.get(SGLANG_ACCEPT_LENGTH):
        return {
            "source": "sglang",
            "mean_acceptance_length": delta[SGLANG_ACCEPT_LENGTH],
            "acceptance_rate": None,
        }
    return None


def prefix_cache_hit_rate(delta: dict[str, float]) -> float | None:
    queries = delta.get(VLLM_CACHE_QUERIES, 0.0)
    if queries > 0:
        return delta.get(VLLM_CACHE_HITS, 0.0) / queries
    if SGLANG_CACHE_HIT_RATE in delta:
        return delta[SGLANG_CACHE_HIT_RATE]
    return None
