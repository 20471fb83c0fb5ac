"""Dishonest modes of the simulated serving system: targets for the verification tests,
and only theirs — a `Behaviour` plugin (agentperf/simulator/behaviour.py) the production
server and transport never import.

Each mode breaks one rule of an honest deployment the way a gamed one would, and each is
meant to be caught by the verification checks named here and no other
(docs/verification.md); the two cache modes break both cache checks, the per-request bound
and the window's cache truth:

| mode | what the deployment does | caught by |
|---|---|---|
| ``truncated`` | under load, stops answers at half their requested length | ``output_lengths`` |
| ``padded`` | under load, generates half the answer but reports the full length | ``token_counts`` |
| ``cache_shared`` | ignores the per-session namespace: reuses cache across agents | ``cache_honesty``, ``cache_truth`` |
| ``cache_inflated`` | reports every prompt token but the last as cached (usage and counters) | ``cache_honesty``, ``cache_truth`` |
| ``other_model`` | serves another model (its greedy outputs differ) | ``model_identity`` |
| ``fake_spec`` | forces every draft token accepted (3 drafts per step) | ``speculative_decoding`` |
| ``fewer_accelerators`` | its hardware shows half the accelerators the config claims | ``accelerators`` |

"Under load" means at least ``under_load`` requests in flight: the qualification probes run
one request at a time, so these modes pass them — which is why fidelity is also checked
under load. In process: ``SimTransport(..., behaviour=parse("truncated"))``,
``run_with_simulator(..., behaviour=parse(...))``; to the real-time server in its own
process, by name: ``start_server(..., behaviour=plugin("cache_inflated"))``, i.e.
``python -m runner.twin_server --behaviour tests.support.dishonest:parse=cache_inflated``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agentperf.simulator.prompts import filler

TRUNCATED = "truncated"
PADDED = "padded"
CACHE_SHARED = "cache_shared"
CACHE_INFLATED = "cache_inflated"
OTHER_MODEL = "other_model"
FAKE_SPEC = "fake_spec"
FEWER_ACCELERATORS = "fewer_accelerators"
MODES = (
    TRUNCATED,
    PADDED,
    CACHE_SHARED,
    CACHE_INFLATED,
    OTHER_MODEL,
    FAKE_SPEC,
    FEWER_ACCELERATORS,
)

# Another "model": the same one-token words in another order (a different greedy output).
_OTHER_WORDS = (" but", " are", " the", " you", " was", " for", " not", " and")
_OTHER_CYCLE = "".join(_OTHER_WORDS)
NAMESPACE_PREFIX = "agentperf-session "


@dataclass(frozen=True, slots=True)
class Dishonesty:
    modes: frozenset[str] = frozenset()
    fraction: float = 0.5  # truncated / padded: the share of the answer really generated
    under_load: int = 2  # truncated / padded apply from this many requests in flight

    @classmethod
    def parse(cls, spec: str | Iterable[str] | None) -> Dishonesty:
        """From ``"truncated,padded"``, a list of names, or None (honest)."""
        if not spec:
            return cls()
        names = spec.split(",") if isinstance(spec, str) else list(spec)
        modes = frozenset(n.strip() for n in names if n.strip())
        unknown = sorted(modes - set(MODES))
        if unknown:
            raise ValueError(f"unknown dishonest mode(s) {unknown}; known: {', '.join(MODES)}")
        return cls(modes=modes)

    def __bool__(self) -> bool:
        return bool(self.modes)

    def profile(self, profile: Any) -> Any:
        """The profile the deployment really runs (fake_spec: every draft accepted)."""
        if FAKE_SPEC in self.modes:
            return dataclasses.replace(
                profile,
                spec_k=max(3, int(profile.spec_k)),
                spec_acceptance=1.0,
                spec_acceptance_by_kind=(),
                spec_default_mix=(),
                spec_position_decay=1.0,
            )
        return profile

    def lengths(self, stop_at: int, *, in_flight: int) -> tuple[int, int]:
        """(tokens really generated, completion_tokens reported) for an answer of ``stop_at``."""
        if in_flight < self.under_load or stop_at < 2:
            return stop_at, stop_at
        short = max(1, math.ceil(stop_at * self.fraction))
        if TRUNCATED in self.modes:
            return short, short
        if PADDED in self.modes:
            return short, stop_at
        return stop_at, stop_at

    def prefix_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body the prefix cache keys on (cache_shared: the session namespace removed)."""
        if CACHE_SHARED not in self.modes:
            return body
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not isinstance(messages[0], dict):
            return body
        first = dict(messages[0])
        content = first.get("content")
        if isinstance(content, str) and content.startswith(NAMESPACE_PREFIX):
            first["content"] = content.split("\n", 1)[1] if "\n" in content else ""
        elif isinstance(content, list) and content:
            part = content[0]
            if isinstance(part, dict) and str(part.get("text", "")).startswith(NAMESPACE_PREFIX):
                first["content"] = content[1:]
        return {**body, "messages": [first, *messages[1:]]}

    def cached(self, cached: int, prompt_tokens: int) -> int:
        """The cached_tokens reported for a prompt of which ``cached`` came from the cache
        (cache_inflated: all of it but the last token, the most a real cache ever reports,
        as if every prompt were found whole; its counters claim the same)."""
        if CACHE_INFLATED in self.modes:
            return max(cached, prompt_tokens - 1)
        return cached

    def text(self, n: int, start: int = 0) -> str:
        """``n`` output tokens continuing at token ``start`` (other_model: another model's)."""
        if OTHER_MODEL not in self.modes:
            return filler(n, start)
        if n <= 0:
            return ""
        offset = (start % len(_OTHER_WORDS)) * 4
        cycle = _OTHER_CYCLE * ((offset + 4 * n) // len(_OTHER_CYCLE) + 1)
        return cycle[offset : offset + 4 * n]

    def accelerators_seen(self, used: int) -> int:
        """What the host's telemetry shows (fewer_accelerators: half the claimed count, so a
        one-accelerator claim shows none: the answers come from somewhere else)."""
        if FEWER_ACCELERATORS in self.modes:
            return used // 2
        return used


def parse(spec: str | Iterable[str] | None) -> Dishonesty:
    """The behaviour factory the server loads by name (``tests.support.dishonest:parse=M``)."""
    return Dishonesty.parse(spec)


def plugin(modes: str) -> str:
    """The ``--behaviour`` spec of these modes, for a server in its own process."""
    return f"{__name__}:parse={modes}"
