"""The performance model: continuous batching on replicas of a deployment.

Time is integer nanoseconds on whatever timeline drives the model (``Timeline``): the
real-time server drives it with ``perf_counter_ns`` and timers, the virtual-time mode with a
virtual event loop. The model itself never reads a clock; it advances one batch iteration at
a time, and the per-sequence work of an iteration is vectorised (numpy), so a rack with
thousands of running sequences costs tens of microseconds per iteration, not per token.

Each iteration (see docs/simulator.md for the equations and sources):

    compute  = 2·P_prefill·n_prefill + 2·P_decode·n_decode·(k+1) + a·Σ attended context
    memory   = weight bytes touched + kv_bytes_per_token · Σ context of the batch
    duration = max(compute / (peak FLOP/s · η_c), memory / (HBM B/s · η_b))
               + iteration overhead + k · draft step

and each decoding sequence emits 1 + A tokens, A = min(Geometric, k) accepted drafts with
per-draft acceptance α (seeded), so E[tokens/step] = (1 − α^(k+1)) / (1 − α).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import operator
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from runner.simulator.profile import Profile, RoleConfig
from runner.simulator.prompts import PromptShape

RESYNC_NS = 5_000_000  # a real-time driver that falls this far behind restarts from "now"


class Timeline(Protocol):
    def now_ns(self) -> int: ...

    def call_at(self, t_ns: int, fn: Callable[[], None]) -> None: ...


class RejectedRequest(ValueError):
    """The request can never be served by this deployment (too long for context or memory)."""


class SimRequest:
    """One request inside the model. Owners attach ``on_done`` / ``on_emit`` callbacks."""

    __slots__ = (
        "rid",
        "prompt",
        "max_tokens",
        "stop_at",
        "t_arrival_ns",
        "cached",
        "prefilled",
        "t_first_ns",
        "t_last_ns",
        "n_events",
        "finish_reason",
        "done",
        "cancelled",
        "slot",
        "replica",
        "reserved",
        "on_done",
        "on_emit",
        "owner",
        "accept",
    )

    def __init__(self, rid: str, prompt: PromptShape, max_tokens: int, stop_at: int) -> None:
        self.rid = rid
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.stop_at = stop_at
        self.t_arrival_ns = 0
        self.cached = 0
        self.prefilled = 0
        self.t_first_ns: int | None = None
        self.t_last_ns: int | None = None
        self.n_events = 0
        self.finish_reason: str | None = None
        self.done = False
        self.cancelled = False
        self.slot = -1
        self.replica: Replica | None = None
        self.reserved = 0
        self.on_done: Callable[[SimRequest], None] | None = None
        self.on_emit: Callable[[SimRequest, int, int], None] | None = None
        self.owner: Any = None
        self.accept = -1.0  # first-draft acceptance of this request's text (< 0: the base)


def stop_point(seed: int, rid: str, *, max_tokens: int, min_tokens: int, mean: int) -> int:
    """Seeded early stop (no ``ignore_eos``): min_tokens + Geometric(1/mean), capped."""
    rng = np.random.default_rng([seed, zlib.crc32(rid.encode())])
    extra = int(rng.geometric(1.0 / max(1, mean)))
    return max(1, min(max_tokens, max(min_tokens, 1) + extra - 1))


class KvPool:
    """KV memory of one replica in tokens: prefix-cache blocks (pinned or LRU) + reservations.

    Blocks are keyed by prefix-chain keys. A running request pins the blocks of its prompt
    and reserves room for its output; on release its blocks become evictable, tail first, so
    LRU eviction drops the ends of old prefixes before their beginnings (as vLLM does).

    With prefix caching the bookkeeping is per prompt rather than per block, so a request
    costs a few C-level passes over its keys instead of several Python steps per block
    (the decisions are those of per-block reference counting, checked against it):

    - a block is *pinned* while a pinned prompt (``active``) contains its key; the exact
      pinned total is computed only when a cheap upper bound (the pinned prompts' token sum)
      cannot settle an admission;
    - LRU order: each release stamps its keys with a new generation and logs the prompt
      once; eviction walks the log from the oldest release, tail first, and evicts a block
      only where its stamp is still that release's (a later release moved it) and it is not
      pinned. The log is compacted when it outgrows the cache.
    - stamps are written lazily: a release only queues its record (``unstamped``); the
      queue is stamped, in release order, before anything reads a stamp (an eviction or a
      compaction). Until a pool first has to evict, its releases cost no per-block work.
    - a prompt's matched prefix is looked up from where it leaves the same session's
      previous admitted prompt (``last``): those blocks were all present at its admission,
      and while no eviction has run since (``evictions``) they still are.

    Both are bookkeeping only: every decision is the one the eager version made (docs/
    benchmarks.md "Rack scale"; tests/simulator/test_kv_pool.py against per-block counts).
    """

    __slots__ = (
        "capacity",
        "caching",
        "used",
        "reserved",
        "sizes",
        "stamp",
        "log",
        "gen",
        "active",
        "active_tokens",
        "refs",
        "unstamped",
        "evictions",
        "last",
        "_compact_at",
    )

    def __init__(self, capacity: int, *, caching: bool) -> None:
        self.capacity = capacity
        self.caching = caching
        self.used = 0  # tokens in cached blocks + reservations
        self.reserved = 0  # reservations (output room; decode KV)
        self.sizes: dict[int, int] = {}  # key -> tokens of the block
        # caching: key -> generation of the release that last logged it (absent: never released)
        self.stamp: dict[int, int] = {}
        self.log: deque[tuple[tuple[int, ...], int, int]] = deque()  # (keys, generation, done)
        self.gen = 0
        self.active: dict[int, list[Any]] = {}  # id(keys) -> [keys, pins, prompt tokens]
        self.active_tokens = 0  # Σ tokens of pinned prompts: >= the pinned blocks' tokens
        self.refs: dict[int, int] = {}  # without caching: key -> pins
        self.unstamped: list[tuple[tuple[int, ...], int]] = []  # releases not yet stamped
        self.evictions = 0  # eviction passes so far (each may remove blocks)
        # session -> (keys of its last admitted prompt, evictions at that admission)
        self.last: dict[int, tuple[tuple[int, ...], int]] = {}
        self._compact_at = 4096

    # ------------------------------------------------------------------ pins
    def _pinned(self, extra: Sequence[int] = ()) -> set[int]:
        keys: set[int] = set(extra)
        for prompt in self.active.values():
            keys.update(prompt[0])
        return keys

    def _pin(self, keys: tuple[int, ...], tokens: int) -> None:
        entry = self.active.get(id(keys))
        if entry is None:
            self.active[id(keys)] = [keys, 1, tokens]
        else:
            entry[1] += 1
        self.active_tokens += tokens

    def _unpin(self, keys: tuple[int, ...]) -> None:
        entry = self.active[id(keys)]
        entry[1] -= 1
        self.active_tokens -= entry[2]
        if not entry[1]:
            del self.active[id(keys)]

    # ------------------------------------------------------------------ public
    def acquire(
        self, keys: tuple[int, ...], cum: tuple[int, ...], reserve: int, session: int = 0
    ) -> int | None:
        """Pin the prompt's blocks; return matched prefix tokens, or None if it cannot fit.

        ``session`` (0: none) names the prompt's session, so the blocks it shares with that
        session's previous prompt need no lookup while no eviction has run since."""
        if not self.caching:
            return self._acquire_uncached(keys, cum, reserve)
        sizes = self.sizes
        known = 0  # keys[:known] are certainly cached
        if session:
            last = self.last.get(session)
            if last is not None and last[1] == self.evictions:
                old = last[0]
                n = min(len(old), len(keys)) - 1
                if n > 0 and old[:n] == keys[:n]:  # the usual turn: all but the priming block
                    known = n
                while known <= n and old[known] == keys[known]:
                    known += 1
        found = list(map(sizes.get, keys[known:] if known else keys))
        try:
            m = known + found.index(None)
        except ValueError:
            m = len(keys)
        matched = cum[m - 1] if m else 0
        need = cum[-1] - matched + reserve
        # Fits if the unpinned blocks (hits excluded: pinning them frees nothing) could make
        # room: capacity - reservations - tokens of (pinned ∪ hits) >= need.
        room = self.capacity - self.reserved - need
        if room < self.active_tokens + matched:  # the cheap bound cannot tell: exact
            pinned = self._pinned(keys[:m])
            if room < sum(map(sizes.__getitem__, pinned)):
                return None
        if self.capacity - self.used < need:
            self._evict(need, keys[:m])
        self._pin(keys, cum[-1])
        added = 0
        prev = matched
        for i in range(m, len(keys)):
            k = keys[i]
            end = cum[i]
            if k not in sizes:  # (a block further down a chain cut in the middle stays)
                sizes[k] = end - prev
                added += end - prev
            prev = end
        self.used += added + reserve
        self.reserved += reserve
        if session:
            last_seen = self.last
            if len(last_seen) >= 131_072:  # a hint only: forgetting costs lookups, not results
                last_seen.clear()
            last_seen[session] = (keys, self.evictions)
        return matched

    def release(self, keys: tuple[int, ...], reserve: int) -> None:
        self.used -= reserve
        self.reserved -= reserve
        if not self.caching:
            self._release_uncached(keys)
            return
        self._unpin(keys)
        self.gen += 1
        self.unstamped.append((keys, self.gen))
        if len(self.log) > self._compact_at:
            self._compact()

    def _stamp(self) -> None:
        """Stamp the queued releases, oldest first, and move them to the log."""
        stamp, log = self.stamp, self.log
        for keys, g in self.unstamped:
            stamp.update(zip(keys, itertools.repeat(g)))
            log.append((keys, g, 0))
        self.unstamped.clear()

    def reserve(self, n: int) -> bool:
        if self.capacity - self.used < n and (self.log or self.unstamped):
            self._evict(n, ())
        if self.capacity - self.used < n:
            return False
        self.used += n
        self.reserved += n
        return True

    def unreserve(self, n: int) -> None:
        self.used -= n
        self.reserved -= n

    @property
    def in_use(self) -> int:
        """Tokens that cannot be evicted: pinned blocks and reservations."""
        if not self.caching:
            return self.used
        return self.reserved + sum(map(self.sizes.__getitem__, self._pinned()))

    # ------------------------------------------------------------------ eviction
    def _evict(self, need: int, protect: Sequence[int]) -> None:
        """Evict least recently released blocks, tail first, until ``need`` tokens fit."""
        if self.unstamped:
            self._stamp()
        self.evictions += 1
        pinned: set[int] | None = None
        log, stamp, sizes = self.log, self.stamp, self.sizes
        while self.capacity - self.used < need and log:
            keys, g, done = log[0]
            if pinned is None:
                pinned = self._pinned(protect)
            i = len(keys) - 1 - done
            while i >= 0 and self.capacity - self.used < need:
                k = keys[i]
                i -= 1
                if stamp.get(k) == g and k not in pinned:
                    del stamp[k]
                    self.used -= sizes.pop(k)
            if i < 0:
                log.popleft()
            else:
                log[0] = (keys, g, len(keys) - 1 - i)

    def _compact(self) -> None:
        """Cut each log record to its blocks that still carry its stamp (in order), and drop
        records left with none (queued releases are stamped first). Eviction skips every other block of a record, and a block
        never gets an older stamp back, so the log evicts exactly as before while holding a
        few keys per release (typically the priming block: a session's next prompt restamps
        the rest) instead of a reference to its whole prompt. A record partly walked by an
        eviction keeps only its unwalked part."""
        if self.unstamped:
            self._stamp()
        stamp, eq = self.stamp, operator.eq
        log: deque[tuple[tuple[int, ...], int, int]] = deque()
        for keys, g, done in self.log:
            if done:
                keys = keys[: len(keys) - done]
            live = tuple(
                itertools.compress(keys, map(eq, map(stamp.get, keys), itertools.repeat(g)))
            )
            if live:
                log.append((keys if len(live) == len(keys) else live, g, 0))
        self.log = log
        self._compact_at = max(4096, 2 * len(log))

    # ------------------------------------------------------------------ no caching
    def _acquire_uncached(
        self, keys: tuple[int, ...], cum: tuple[int, ...], reserve: int
    ) -> int | None:
        need = cum[-1] + reserve
        if self.capacity - self.used < need:
            return None
        sizes, refs = self.sizes, self.refs
        prev = 0
        added = 0
        for k, end in zip(keys, cum, strict=True):
            n = refs.get(k)
            if n is None:
                sizes[k] = end - prev
                refs[k] = 1
                added += end - prev
            else:  # the same prompt twice at once: one copy
                refs[k] = n + 1
            prev = end
        self.used += added + reserve
        self.reserved += reserve
        return 0

    def _release_uncached(self, keys: tuple[int, ...]) -> None:
        sizes, refs = self.sizes, self.refs
        freed = 0
        for k in reversed(keys):
            n = refs[k] - 1
            if n:
                refs[k] = n
            else:
                del refs[k]
                freed += sizes.pop(k)
        self.used -= freed


@dataclass(slots=True)
class Counters:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted: int = 0
    iterations: int = 0
    requests_finished: int = 0
    busy_ns: int = 0
    energy_j: float = 0.0  # modelled dynamic energy above idle (profiles with a power section)


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
        nbytes = self.weight_bytes(tokens) + kv
        g = self.gemm_efficiency(tokens)
        imb = self.imbalance(tokens)
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


class Replica:
    """One engine instance: a batch of up to ``max_batch`` sequences, iterated continuously."""

    def __init__(
        self,
        deployment: Deployment,
        role: RoleConfig,
        index: int,
        rng: np.random.Generator,
    ) -> None:
        p = deployment.profile
        self.dep = deployment
        self.role = role.role
        self.index = index
        self.rng = rng
        self.cost = CostModel(p, role)
        self.max_batch = role.max_batch
        self.chunk = role.chunk_tokens
        self.req_chunk = role.request_chunk_tokens or role.chunk_tokens
        self.k = p.spec_k if role.role != "prefill" else 0
        self.alpha = p.spec_acceptance
        # Per-sequence acceptance (by output kind) and its decay along the draft; without
        # either every sequence draws Geometric(1 − α) accepted drafts (the same law).
        self.per_seq_accept = bool(p.spec_acceptance_by_kind or p.spec_default_mix) or (
            p.spec_position_decay < 1.0
        )
        self.decay = np.asarray([p.spec_position_decay**j for j in range(self.k)])
        self.acc = np.full(role.max_batch, p.spec_acceptance)
        # Verify-token budget per iteration (0: every sequence verifies all k drafts).
        self.verify_budget = p.spec_verify_budget_tokens if self.k else 0
        self._plan_k = self.k
        # Modelled power: every accelerator draws idle W always (added by whoever reads the
        # counter) plus (TDP − idle) × the iteration's utilisation, counted here as energy.
        self.n_acc = role.accelerators
        self.p_dyn = 0.0 if p.power_tdp_w is None else p.power_tdp_w - p.power_idle_w
        self.block = p.block_tokens
        self.capacity = p.kv_capacity_tokens(role)
        self.pool = KvPool(self.capacity, caching=p.prefix_caching and role.role != "decode")
        n = role.max_batch
        self.remaining = np.zeros(n, dtype=np.int64)
        self.ctx = np.zeros(n, dtype=np.int64)
        self.events = np.zeros(n, dtype=np.int64)
        self.bonus = np.zeros(n, dtype=np.int64)
        self.dec = np.zeros(n, dtype=bool)
        self.slots: list[SimRequest | None] = [None] * n
        self.free: list[int] = list(range(n - 1, -1, -1))
        self.waiting: deque[SimRequest] = deque()
        self.prefilling: list[SimRequest] = []
        self.incoming: list[tuple[int, int, SimRequest]] = []
        self.counters = Counters()
        self.busy = False
        self.stream = False
        self._seq = 0
        self._wake_at: int | None = None
        self._iter_end = 0
        self._iter_start = 0
        self._plan_prefill: list[tuple[SimRequest, int]] = []
        self._plan_dec: np.ndarray = np.zeros(0, dtype=np.int64)
        self._plan_new: list[SimRequest] = []
        self._cancel_pending = 0
        self._plan_energy = 0.0

    # ---------------------------------------------------------------- load and routing
    @property
    def n_running(self) -> int:
        return self.max_batch - len(self.free)

    @property
    def n_waiting(self) -> int:
        return len(self.waiting) + len(self.incoming)

    @property
    def load(self) -> int:
        return self.n_running + self.n_waiting

    def enqueue(self, req: SimRequest) -> None:
        req.replica = self
        self.waiting.append(req)
        self.kick()

    def add_incoming(self, req: SimRequest, ready_ns: int) -> None:
        req.replica = self
        self._seq += 1
        heapq.heappush(self.incoming, (ready_ns, self._seq, req))
        if not self.busy:
            self._schedule_wake(ready_ns)

    def cancel(self, req: SimRequest) -> None:
        req.cancelled = True
        if req.slot >= 0:
            self._cancel_pending += 1
            if not self.busy:
                self._purge_cancelled()

    # ---------------------------------------------------------------- driving
    def kick(self) -> None:
        if not self.busy:
            self._begin(self.dep.timeline.now_ns())

    def _schedule_wake(self, t_ns: int) -> None:
        if self._wake_at is not None and self._wake_at <= t_ns:
            return
        self._wake_at = t_ns
        self.dep.timeline.call_at(t_ns, self._wake)

    def _wake(self) -> None:
        self._wake_at = None
        if not self.busy:
            self._begin(self.dep.timeline.now_ns())

    def _begin(self, t_ns: int) -> None:
        seconds = self.plan(t_ns)
        if seconds is None:
            self.busy = False
            if self.incoming:
                self._schedule_wake(max(self.incoming[0][0], t_ns + 1))
            return
        self.busy = True
        dur = max(1, round(seconds * 1e9))
        self._iter_start = t_ns
        self._iter_end = t_ns + dur
        self.dep.timeline.call_at(self._iter_end, self._end)

    def _end(self) -> None:
        end = self._iter_end
        self.counters.busy_ns += end - self._iter_start
        self.complete(end)
        now = self.dep.timeline.now_ns()
        self._begin(end if now - end < RESYNC_NS else now)

    # ---------------------------------------------------------------- one iteration
    def _purge_cancelled(self) -> None:
        for req in list(self.slots):
            if req is not None and req.cancelled:
                self._release(req)
        self.prefilling = [r for r in self.prefilling if not r.cancelled]
        self._cancel_pending = 0

    def _admit(self, req: SimRequest) -> bool:
        reserve = req.stop_at if self.role == "aggregated" else 0
        prompt = req.prompt
        matched = self.pool.acquire(prompt.keys, prompt.cum, reserve, prompt.session_key)
        if matched is None:
            return False
        cached = min((matched // self.block) * self.block, req.prompt.tokens - 1)
        req.cached = cached
        req.prefilled = cached
        req.reserved = reserve
        c = self.counters
        c.prefix_queries += req.prompt.tokens
        c.prefix_hits += cached
        c.prompt_tokens += req.prompt.tokens
        slot = self.free.pop()
        self.slots[slot] = req
        req.slot = slot
        if req.accept >= 0.0:
            self.acc[slot] = req.accept
        return True

    def _release(self, req: SimRequest) -> None:
        slot = req.slot
        if slot < 0:
            return
        self.slots[slot] = None
        self.dec[slot] = False
        self.bonus[slot] = 0
        self.acc[slot] = self.alpha
        self.free.append(slot)
        req.slot = -1
        if self.role == "decode":
            self.pool.unreserve(req.reserved)
        else:
            self.pool.release(req.prompt.keys, req.reserved)
        req.reserved = 0

    def plan(self, t_ns: int) -> float | None:
        """Choose the next iteration's work at ``t_ns``; return its duration in seconds."""
        if self._cancel_pending:
            self._purge_cancelled()
        k1 = self.k + 1
        prefill: list[tuple[SimRequest, int]] = []
        new: list[SimRequest] = []
        if self.role == "decode":
            inc = self.incoming
            while inc and inc[0][0] <= t_ns and self.free:
                req = inc[0][2]
                if req.cancelled:
                    heapq.heappop(inc)
                    continue
                need = req.prompt.tokens + req.stop_at
                if not self.pool.reserve(need):
                    break
                heapq.heappop(inc)
                req.reserved = need
                slot = self.free.pop()
                self.slots[slot] = req
                req.slot = slot
                self.remaining[slot] = req.stop_at
                self.ctx[slot] = req.prompt.tokens
                self.events[slot] = 0
                self.bonus[slot] = 1
                self.dec[slot] = True
                if req.accept >= 0.0:
                    self.acc[slot] = req.accept
                new.append(req)
        dec_idx = np.flatnonzero(self.dec)
        n_dec = len(dec_idx)
        vb = self.verify_budget
        if vb and n_dec * k1 > vb:  # confidence-scheduled verification: the surest drafts
            k1 = max(1, vb // n_dec)
        self._plan_k = k1 - 1
        if self.role != "decode":
            budget = self.chunk - n_dec * k1
            per_req = self.req_chunk
            for req in self.prefilling:
                if budget <= 0:
                    break
                n = min(budget, per_req, req.prompt.tokens - req.prefilled)
                if n > 0:
                    prefill.append((req, n))
                    budget -= n
            waiting = self.waiting
            while budget > 0 and waiting and self.free:
                req = waiting[0]
                if req.cancelled:
                    waiting.popleft()
                    continue
                if not self._admit(req):
                    break
                waiting.popleft()
                self.prefilling.append(req)
                n = min(budget, per_req, req.prompt.tokens - req.prefilled)
                prefill.append((req, n))
                budget -= n
        if not prefill and n_dec == 0:
            return None
        cm = self.cost
        p_tokens = 0
        p_att = 0.0
        p_read = 0
        p_full = 0.0
        for req, n in prefill:
            p_tokens += n
            p_read += req.prefilled + n
            if cm.attn:
                p_att += n * cm.attended(req.prefilled + n // 2)
            if cm.attn_full:
                p_full += n * (req.prefilled + n / 2)
        d_ctx = 0
        d_att = 0.0
        rank_s: float | None = None
        if cm.dp_attention:
            dp = cm.dp
            work = np.zeros(dp)
            for req, n in prefill:
                work[req.slot % dp] += cm.rank_seconds(
                    tokens=n,
                    attended=n * cm.attended(req.prefilled + n // 2),
                    full_attended=n * (req.prefilled + n / 2),
                    ctx_read=req.prefilled + n,
                    prefill=True,
                )
        if n_dec:
            ctx = self.ctx[dec_idx]
            d_ctx = int(ctx.sum())
            if cm.attn:
                d_att = float(d_ctx if cm.window is None else np.minimum(ctx, cm.window).sum())
            if cm.dp_attention:
                att = ctx if cm.window is None else np.minimum(ctx, cm.window)
                per_seq = cm.rank_seconds(
                    tokens=k1,
                    attended=k1 * att,
                    full_attended=k1 * ctx,
                    ctx_read=ctx,
                    prefill=False,
                )
                work += np.bincount(dec_idx % cm.dp, weights=per_seq, minlength=cm.dp)
        if cm.dp_attention:
            rank_s = float(work.max())
        cost = cm.cost(
            prefill_tokens=p_tokens,
            prefill_attended=p_att,
            prefill_ctx_read=p_read,
            decode_seqs=n_dec,
            verify=k1,
            decode_ctx=d_ctx,
            decode_attended=d_att,
            drafting=self.k > 0 and n_dec > 0,
            prefill_full_attended=p_full,
            prefill_seqs=len(prefill),
            rank_s=rank_s,
        )
        if self.p_dyn:
            self._plan_energy = self.n_acc * self.p_dyn * cost.utilisation * cost.seconds
        self._plan_prefill = prefill
        self._plan_dec = dec_idx
        self._plan_new = new
        return cost.seconds

    def complete(self, end_ns: int) -> None:
        """Apply the planned iteration's effects at its end time."""
        c = self.counters
        c.iterations += 1
        c.energy_j += self._plan_energy
        stream = self.stream
        finished: list[SimRequest] = []
        if self._plan_prefill:
            done_any = False
            for req, n in self._plan_prefill:
                if req.cancelled or req.slot < 0:
                    continue
                req.prefilled += n
                if req.prefilled < req.prompt.tokens:
                    continue
                done_any = True
                if self.role == "prefill":
                    self._release(req)
                    self.dep.handoff(req, end_ns)
                    continue
                slot = req.slot
                req.t_first_ns = end_ns
                c.generation_tokens += 1
                self.events[slot] = 1
                self.ctx[slot] = req.prompt.tokens + 1
                self.remaining[slot] = req.stop_at - 1
                if stream and req.on_emit is not None:
                    req.on_emit(req, 1, end_ns)
                if req.stop_at <= 1:
                    finished.append(req)
                else:
                    self.dec[slot] = True
            if done_any:
                self.prefilling = [
                    r for r in self.prefilling if r.prefilled < r.prompt.tokens and r.slot >= 0
                ]
            self._plan_prefill = []
        idx = self._plan_dec
        if len(idx):
            n = len(idx)
            k = self._plan_k
            if k and self.per_seq_accept:
                # P(draft j accepted | all before) = α_s · decay^(j−1), α_s by output kind;
                # one uniform per sequence against the survival Π α_i of each prefix.
                # Column by column (a running product, as cumprod along the drafts computes
                # it, so the same floats): numpy's cumprod over a short axis cost 4x this.
                first = self.acc[idx]
                u = self.rng.random(n)
                decay = self.decay
                surv = np.minimum(first * decay[0], 1.0)
                acc = (u < surv).astype(np.int64)
                for j in range(1, k):
                    surv = surv * np.minimum(first * decay[j], 1.0)
                    acc += u < surv
                c.spec_drafts += n
                c.spec_draft_tokens += n * k
                c.spec_accepted += int(acc.sum())
                steps = acc + 1
            elif k:
                a = self.alpha
                if a >= 1.0:
                    acc = np.full(n, k, dtype=np.int64)
                elif a <= 0.0:
                    acc = np.zeros(n, dtype=np.int64)
                else:
                    acc = np.minimum(self.rng.geometric(1.0 - a, size=n) - 1, k)
                c.spec_drafts += n
                c.spec_draft_tokens += n * k
                c.spec_accepted += int(acc.sum())
                steps = acc + 1
            else:
                steps = np.ones(n, dtype=np.int64)
            if self.role == "decode":
                steps += self.bonus[idx]
                self.bonus[idx] = 0
                for req in self._plan_new:
                    req.t_first_ns = end_ns
                self._plan_new = []
            rem = self.remaining[idx]
            steps = np.minimum(steps, rem)
            left = rem - steps
            self.remaining[idx] = left
            self.ctx[idx] += steps
            self.events[idx] += 1
            c.generation_tokens += int(steps.sum())
            slots = self.slots
            if stream:
                for s, m in zip(idx.tolist(), steps.tolist(), strict=True):
                    req = slots[s]
                    if req is not None and req.on_emit is not None and m > 0 and not req.cancelled:
                        req.on_emit(req, m, end_ns)
            for s in idx[left == 0].tolist():
                req = slots[s]
                if req is not None:
                    finished.append(req)
            self._plan_dec = np.zeros(0, dtype=np.int64)
        for req in finished:
            self._finish(req, end_ns)

    def _finish(self, req: SimRequest, end_ns: int) -> None:
        req.n_events = int(self.events[req.slot])
        req.t_last_ns = end_ns
        req.done = True
        req.finish_reason = "length" if req.stop_at >= req.max_tokens else "stop"
        self._release(req)
        if req.cancelled:
            return
        self.counters.requests_finished += 1
        if req.on_done is not None:
            req.on_done(req)


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
        fr = profile.roles[0]
        self.max_prompt_tokens = profile.kv_capacity_tokens(fr)
        if profile.mode == "disaggregated":
            self.max_prompt_tokens = min(
                self.max_prompt_tokens, profile.kv_capacity_tokens(profile.roles[1])
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
        key = req.prompt.session_key if session_key is None else session_key
        self._route(key, lambda rep: rep.load).enqueue(req)

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
