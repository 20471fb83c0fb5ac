"""A deployment: all replicas of a profile, with request limits, session-sticky routing
and the prefill → decode handoff (``Deployment``), the model's entry point for the
real-time server and the virtual-time mode.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from agentperf.simulator.profile_types import Profile
from agentperf.simulator.prompts import PromptShape
from agentperf.simulator.scheduler import Counters, Replica, SimRequest, Timeline


class RejectedRequest(ValueError):
    """The request can never be served by this deployment (too long for context or memory)."""


def stop_point(seed: int, rid: str, *, max_tokens: int, min_tokens: int, mean: int) -> int:
    """Seeded early stop (no ``ignore_eos``): min_tokens + Geometric(1/mean), capped."""
    rng = np.random.default_rng([seed, zlib.crc32(rid.encode())])
    extra = int(rng.geometric(1.0 / max(1, mean)))
    return max(1, min(max_tokens, max(min_tokens, 1) + extra - 1))


def _load(rep: Replica) -> int:
    return rep.load


class Deployment:
    """All replicas of a profile, with session-sticky routing and P/D handoff."""

    def __init__(self, profile: Profile, timeline: Timeline, *, seed: int = 0) -> None:
        self.profile = profile
        self.timeline = timeline
        self.seed = seed
        self.front: list[Replica] = []
        self.back: list[Replica] = []
        for ri, role in enumerate(profile.roles):
            for i in range(role.replicas):
                rep = Replica(self, role, i, np.random.default_rng([seed, ri, i]))
                (self.back if role.role == "decode" else self.front).append(rep)
        self.sessions: dict[int, int] = {}
        self.rejected = 0
        # Output-kind acceptance: cumulative mix edges → acceptance (docs/simulator.md
        # "Speculative decoding"); the salt makes the draw depend on the seed.
        self._by_kind = bool(profile.spec_acceptance_by_kind or profile.spec_default_mix)
        self._mix: list[tuple[float, float]] = []
        edge = 0.0
        for kind, w in profile.mix_weights():
            edge += w
            self._mix.append((edge, profile.acceptance_for(kind)))
        self._mix_salt = f"accept:{seed}".encode()
        # what one whole replica holds (a mean-field slice answers as the replica would)
        fr = profile.roles[0]
        self.max_prompt_tokens = profile.kv_capacity_tokens(fr) * fr.mean_field
        if profile.mode == "disaggregated":
            back = profile.roles[1]
            self.max_prompt_tokens = min(
                self.max_prompt_tokens, profile.kv_capacity_tokens(back) * back.mean_field
            )

    @property
    def replicas(self) -> list[Replica]:
        return self.front + self.back

    def set_streaming(self, on: bool) -> None:
        for r in self.replicas:
            r.stream = on

    def new_request(
        self,
        rid: str,
        prompt: PromptShape,
        *,
        max_tokens: int | None,
        min_tokens: int = 0,
        ignore_eos: bool = False,
        output_kind: Any = None,
    ) -> SimRequest:
        """Validate limits and fix the output length (seeded early stop without ignore_eos).

        ``output_kind`` (a turn's metadata: one of OUTPUT_KINDS, or a mapping kind → share)
        sets the request's draft acceptance; without it a kind is drawn, seeded by the
        request id, from the profile's default mix (docs/simulator.md "Speculative decoding").
        """
        ctx = self.profile.context_length
        if prompt.tokens >= ctx:
            raise RejectedRequest(
                f"This model's maximum context length is {ctx} tokens. However, you requested "
                f"{prompt.tokens} tokens in the messages."
            )
        room = ctx - prompt.tokens
        if max_tokens is None:
            max_tokens = room
        if max_tokens < 1:
            raise RejectedRequest("max_tokens must be at least 1")
        if max_tokens > room:
            raise RejectedRequest(
                f"This model's maximum context length is {ctx} tokens. However, you requested "
                f"{prompt.tokens + max_tokens} tokens ({prompt.tokens} in the messages, "
                f"{max_tokens} in the completion)."
            )
        if ignore_eos:
            stop_at = max_tokens
        else:
            stop_at = stop_point(
                self.seed,
                rid,
                max_tokens=max_tokens,
                min_tokens=min(min_tokens, max_tokens),
                mean=self.profile.eos_mean_tokens,
            )
        if prompt.tokens + stop_at > self.max_prompt_tokens:
            raise RejectedRequest(
                f"prompt + output ({prompt.tokens + stop_at} tokens) exceeds the KV cache of "
                f"one replica ({self.max_prompt_tokens} tokens)"
            )
        req = SimRequest(rid, prompt, max_tokens, stop_at)
        req.accept = self.acceptance(rid, output_kind)
        return req

    def acceptance(self, rid: str, output_kind: Any = None) -> float:
        """First-draft acceptance of request ``rid`` whose text is ``output_kind``."""
        p = self.profile
        if not self._by_kind:
            return p.spec_acceptance
        if isinstance(output_kind, str):
            return p.acceptance_for(output_kind)
        if isinstance(output_kind, dict) and output_kind:
            shares = [
                (str(k), float(v))
                for k, v in output_kind.items()
                if isinstance(v, int | float) and not isinstance(v, bool) and v > 0
            ]
            total = sum(v for _, v in shares)
            if total > 0:
                return sum(v * p.acceptance_for(k) for k, v in shares) / total
        if not self._mix:
            return p.spec_acceptance
        # a seeded uniform from the request id (a hash: a generator per request costs 40 µs)
        digest = hashlib.blake2b(rid.encode(), digest_size=8, key=self._mix_salt).digest()
        u = int.from_bytes(digest, "little") / 18446744073709551616.0
        for edge, a in self._mix:
            if u < edge:
                return a
        return self._mix[-1][1]

    def submit(self, req: SimRequest, *, session_key: int | None = None) -> None:
        req.t_arrival_ns = self.timeline.now_ns()
        front = self.front
        if len(front) == 1:  # what _route answers, without building its key
            front[0].enqueue(req)
            return
        key = req.prompt.session_key if session_key is None else session_key
        self._route(key, _load).enqueue(req)

    def _route(self, key: int, load: Callable[[Replica], int]) -> Replica:
        """The front replica of session ``key``: sticky once chosen; a new session goes to
        the replica with the least ``load``."""
        front = self.front
        if len(front) == 1:
            return front[0]
        i = self.sessions.get(key)
        if i is None:
            i = min(range(len(front)), key=lambda j: (load(front[j]), j))
            self.sessions[key] = i
        return front[i]

    def prime(self, prompt: PromptShape, *, session_key: int | None = None) -> bool:
        """Cache ``prompt``'s blocks (evictable, most recently used) on the replica its
        session will be routed to, as if it had been served; no time passes and no counter
        moves. New sessions go to the replica holding the fewest tokens. Returns False when
        prefix caching is off or the prompt does not fit."""
        if not self.front[0].pool.caching:
            return False
        key = prompt.session_key if session_key is None else session_key
        rep = self._route(key, lambda r: r.pool.used)
        if rep.pool.acquire(prompt.keys, prompt.cum, 0, prompt.session_key) is None:
            return False
        rep.pool.release(prompt.keys, 0)
        return True

    def handoff(self, req: SimRequest, prefill_end_ns: int) -> None:
        """Prefill done: ship the KV to the least-loaded decode replica."""
        p = self.profile
        transfer_s = (req.prompt.tokens * p.kv_bytes_per_token) / (
            p.kv_transfer_gb_s * 1e9
        ) + p.kv_transfer_latency_us * 1e-6
        back = self.back
        i = min(range(len(back)), key=lambda j: (back[j].load, j))
        back[i].add_incoming(req, prefill_end_ns + max(1, round(transfer_s * 1e9)))

    def cancel(self, req: SimRequest) -> None:
        if req.done or req.cancelled:
            return
        if req.replica is not None:
            req.replica.cancel(req)
        else:
            req.cancelled = True

    def totals(self) -> Counters:
        out = Counters()
        for r in self.replicas:
            for name in Counters.__dataclass_fields__:
                setattr(out, name, getattr(out, name) + getattr(r.counters, name))
        return out

    def gauges(self) -> dict[str, float]:
        reps = self.replicas
        cap = sum(r.capacity for r in reps)
        return {
            "running": float(sum(r.n_running for r in reps)),
            "waiting": float(sum(r.n_waiting for r in reps)),
            "kv_usage": (sum(r.pool.in_use for r in reps) / cap) if cap else 0.0,
        }
