"""Continuous batching on one replica of a deployment (``Replica``).

Time is integer nanoseconds on whatever timeline drives the model (``Timeline``): the
real-time server drives it with ``perf_counter_ns`` and timers, the virtual-time mode with a
virtual event loop. The model itself never reads a clock; it advances one batch iteration at
a time, and the per-sequence work of an iteration is vectorised (numpy), so a rack with
thousands of running sequences costs tens of microseconds per iteration, not per token.

An iteration has two halves with one value between them (vLLM's ``SchedulerOutput`` seam):
``Replica.plan`` chooses its work at its start and prices it with the cost model
(``agentperf.simulator.cost``), returning an ``IterationPlan``; ``Replica.complete`` applies
that plan at its end. Each decoding sequence emits 1 + A tokens, A = min(Geometric, k)
accepted drafts with per-draft acceptance α (seeded), so E[tokens/step] = (1 − α^(k+1)) /
(1 − α). The equations and their sources: docs/simulator.md "The model".
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import numpy as np

from agentperf.simulator.cost import CostModel, IterationCost
from agentperf.simulator.kv import KvPool
from agentperf.simulator.profile_types import Profile, RoleConfig
from agentperf.simulator.prompts import PromptShape

RESYNC_NS = 5_000_000  # a real-time driver that falls this far behind restarts from "now"


class Timeline(Protocol):
    def now_ns(self) -> int: ...

    def call_at(self, t_ns: int, fn: Callable[[], None]) -> None: ...


# Iterations of a mean-field slice's rank work its ghost ranks draw from (Replica._ghost_max)
GHOST_STEPS = 256


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


class ReplicaHost(Protocol):
    """What a replica needs from the deployment that owns it (``deployment.Deployment``)."""

    @property
    def profile(self) -> Profile: ...

    @property
    def timeline(self) -> Timeline: ...

    @property
    def seed(self) -> int: ...

    def handoff(self, req: SimRequest, prefill_end_ns: int) -> None: ...


@dataclass(frozen=True, slots=True)
class IterationPlan:
    """One iteration's work, chosen by ``Replica.plan`` at its start and applied by
    ``Replica.complete`` at its end (vLLM's ``SchedulerOutput``): nothing else carries
    state from one half to the other."""

    seconds: float  # the iteration's duration (the cost model's)
    prefill: tuple[tuple[SimRequest, int], ...]  # (request, tokens of its chunk)
    decode: np.ndarray  # slots of the decoding sequences (int64)
    k: int  # drafts each decoding sequence verifies (< the replica's k under a verify budget)
    new: tuple[SimRequest, ...]  # decode replica: arrived by handoff, first token at the end
    energy_j: float  # modelled dynamic energy of the iteration (0 without a power section)


class Replica:
    """One engine instance: a batch of up to ``max_batch`` sequences, iterated continuously."""

    def __init__(
        self,
        deployment: ReplicaHost,
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
        # Per slot, the survival Π_{i≤j} min(α_s·decay^i, 1) of each draft position j (one
        # array per j), written when the slot's α_s changes, so an iteration gathers them
        # instead of recomputing the running product (the same floats: ``_survival``).
        self._surv_of: dict[float, list[float]] = {}
        self.surv: list[np.ndarray] = []
        self._surv_a = [p.spec_acceptance] * role.max_batch  # the α the columns hold
        if self.per_seq_accept and self.k:
            base = self._survival(p.spec_acceptance)
            self.surv = [np.full(role.max_batch, base[j]) for j in range(self.k)]
        # Verify-token budget per iteration (0: every sequence verifies all k drafts).
        self.verify_budget = p.spec_verify_budget_tokens if self.k else 0
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
        self._cancel_pending = 0
        # A mean-field slice's ghost ranks (docs/simulator.md "Mean-field trials"): the
        # whole replica's other dp·(s − 1) ranks, whose work each step is drawn from the
        # slice's own ranks' work over its last GHOST_STEPS iterations.
        s = role.mean_field
        self.ghosts = role.dp * (s - 1)
        self._ghost_work = np.zeros(GHOST_STEPS * role.dp) if s > 1 else np.zeros(0)
        self._ghost_filled = 0
        self._ghost_at = 0
        self._ghost_rng = np.random.default_rng([deployment.seed, 0x6705, index]) if s > 1 else None

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
        plan = self.plan(t_ns)
        if plan is None:
            self.busy = False
            if self.incoming:
                self._schedule_wake(max(self.incoming[0][0], t_ns + 1))
            return
        self.busy = True
        end = t_ns + max(1, round(plan.seconds * 1e9))
        self.dep.timeline.call_at(end, partial(self._end, plan, t_ns, end))

    def _end(self, plan: IterationPlan, start: int, end: int) -> None:
        self.counters.busy_ns += end - start
        self.complete(plan, end)
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
        self._set_accept(slot, req.accept if req.accept >= 0.0 else self.alpha)
        return True

    def _survival(self, a: float) -> list[float]:
        """Survival of each draft position for first-draft acceptance ``a``: the running
        product min(a·decay^0, 1) · min(a·decay^1, 1) · …, with the numpy operations a
        whole batch's column would get (so the same floats)."""
        found = self._surv_of.get(a)
        if found is None:
            first = np.asarray([a], dtype=np.float64)
            decay = self.decay
            col = np.minimum(first * decay[0], 1.0)
            found = [float(col[0])]
            for j in range(1, self.k):
                col = col * np.minimum(first * decay[j], 1.0)
                found.append(float(col[0]))
            if len(self._surv_of) >= 4096:  # blended kinds can give many values
                self._surv_of.clear()
            self._surv_of[a] = found
        return found

    def _set_accept(self, slot: int, a: float) -> None:
        """Admission: the slot's acceptance is its request's (α when it has none: the
        value every release leaves); the survival columns are written only when it
        changes from the slot's previous request's."""
        if self.surv and self._surv_a[slot] != a:
            self._surv_a[slot] = a
            for column, value in zip(self.surv, self._survival(a), strict=True):
                column[slot] = value

    def _release(self, req: SimRequest) -> None:
        slot = req.slot
        if slot < 0:
            return
        self.slots[slot] = None
        self.dec[slot] = False
        self.bonus[slot] = 0
        self.free.append(slot)
        req.slot = -1
        if self.role == "decode":
            self.pool.unreserve(req.reserved)
        else:
            self.pool.release(req.prompt.keys, req.reserved)
        req.reserved = 0

    def _ghost_max(self, work: np.ndarray) -> float:
        """The busiest rank of the whole replica for a mean-field slice whose own ranks'
        work this iteration is ``work``: the max over them and ``ghosts`` draws from their
        recent history (the slice's ranks stand for the rest of the replica's)."""
        dp = len(work)
        at = self._ghost_at
        self._ghost_work[at : at + dp] = work
        self._ghost_at = (at + dp) % len(self._ghost_work)
        self._ghost_filled = min(self._ghost_filled + dp, len(self._ghost_work))
        assert self._ghost_rng is not None
        draws = self._ghost_rng.integers(0, self._ghost_filled, size=self.ghosts)
        return float(max(work.max(), self._ghost_work[draws].max()))

    def plan(self, t_ns: int) -> IterationPlan | None:
        """Choose the next iteration's work at ``t_ns`` and price it (None: nothing to do).

        Admissions happen here (a slot and KV memory are taken now); everything the
        iteration's end applies is in the returned plan, for ``complete``."""
        if self._cancel_pending:
            self._purge_cancelled()
        new = self._admit_handoffs(t_ns) if self.role == "decode" else []
        dec_idx = np.flatnonzero(self.dec)
        n_dec = len(dec_idx)
        k1 = self.k + 1
        vb = self.verify_budget
        if vb and n_dec * k1 > vb:  # confidence-scheduled verification: the surest drafts
            k1 = max(1, vb // n_dec)
        prefill = self._choose_prefill(self.chunk - n_dec * k1) if self.role != "decode" else []
        if not prefill and n_dec == 0:
            return None
        cost = self._price(prefill, dec_idx, k1)
        return IterationPlan(
            seconds=cost.seconds,
            prefill=tuple(prefill),
            decode=dec_idx,
            k=k1 - 1,
            new=tuple(new),
            energy_j=(
                self.n_acc * self.p_dyn * cost.utilisation * cost.seconds if self.p_dyn else 0.0
            ),
        )

    def _admit_handoffs(self, t_ns: int) -> list[SimRequest]:
        """A decode replica takes the handed-off requests ready by ``t_ns`` while it has a
        slot and their prompt and output fit in its KV memory; each emits its first token at
        the iteration's end."""
        new: list[SimRequest] = []
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
            self._set_accept(slot, req.accept if req.accept >= 0.0 else self.alpha)
            new.append(req)
        return new

    def _choose_prefill(self, budget: int) -> list[tuple[SimRequest, int]]:
        """The prefill chunks of this iteration within ``budget`` tokens (what decoding
        leaves of the chunk budget): the requests already prefilling first, then waiting
        ones admitted in order while they fit; each at most ``req_chunk`` tokens."""
        prefill: list[tuple[SimRequest, int]] = []
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
        return prefill

    def _price(
        self, prefill: list[tuple[SimRequest, int]], dec_idx: np.ndarray, k1: int
    ) -> IterationCost:
        """The cost model's price of an iteration: its prefill chunks, and ``k1`` tokens
        verified by each decoding slot of ``dec_idx`` (docs/simulator.md "The model")."""
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
        n_dec = len(dec_idx)
        d_ctx = 0
        d_att = 0.0
        if n_dec:
            ctx = self.ctx[dec_idx]
            d_ctx = int(ctx.sum())
            if cm.attn:
                d_att = float(d_ctx if cm.window is None else np.minimum(ctx, cm.window).sum())
        return cm.cost(
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
            rank_s=self._busiest_rank(prefill, dec_idx, k1) if cm.dp_attention else None,
        )

    def _busiest_rank(
        self, prefill: list[tuple[SimRequest, int]], dec_idx: np.ndarray, k1: int
    ) -> float:
        """Data-parallel attention: the seconds of the busiest rank's own work (each
        sequence's attention and dense layers on the rank of its slot); a mean-field slice's
        ghost ranks count too (``_ghost_max``)."""
        cm = self.cost
        work = np.zeros(cm.dp)
        for req, n in prefill:
            work[req.slot % cm.dp] += cm.rank_seconds(
                tokens=n,
                attended=n * cm.attended(req.prefilled + n // 2),
                full_attended=n * (req.prefilled + n / 2),
                ctx_read=req.prefilled + n,
                prefill=True,
            )
        if len(dec_idx):
            ctx = self.ctx[dec_idx]
            att = ctx if cm.window is None else np.minimum(ctx, cm.window)
            per_seq = cm.rank_seconds(
                tokens=k1,
                attended=k1 * att,
                full_attended=k1 * ctx,
                ctx_read=ctx,
                prefill=False,
            )
            work += np.bincount(dec_idx % cm.dp, weights=per_seq, minlength=cm.dp)
        return float(work.max()) if cm.scale == 1 else self._ghost_max(work)

    def complete(self, plan: IterationPlan, end_ns: int) -> None:
        """Apply ``plan``'s effects at its end time ``end_ns``."""
        c = self.counters
        c.iterations += 1
        c.energy_j += plan.energy_j
        finished: list[SimRequest] = []
        if plan.prefill:
            self._complete_prefill(plan.prefill, end_ns, finished)
        if len(plan.decode):
            self._complete_decode(plan, end_ns, finished)
        for req in finished:
            self._finish(req, end_ns)

    def _complete_prefill(
        self, chunks: tuple[tuple[SimRequest, int], ...], end_ns: int, finished: list[SimRequest]
    ) -> None:
        """The prefill chunks done: a prompt fully read hands off (a prefill replica) or
        emits its first token and starts decoding (or finishes, when one token was asked)."""
        c = self.counters
        done_any = False
        for req, n in chunks:
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
            if self.stream and req.on_emit is not None:
                req.on_emit(req, 1, end_ns)
            if req.stop_at <= 1:
                finished.append(req)
            else:
                self.dec[slot] = True
        if done_any:
            self.prefilling = [
                r for r in self.prefilling if r.prefilled < r.prompt.tokens and r.slot >= 0
            ]

    def _draft_steps(self, idx: np.ndarray, k: int) -> np.ndarray:
        """Tokens each decoding slot of ``idx`` emits when it verifies ``k`` drafts: 1 plus
        its accepted drafts, drawn (seeded) and counted (docs/simulator.md "Speculative
        decoding")."""
        n = len(idx)
        if not k:
            return np.ones(n, dtype=np.int64)
        if self.per_seq_accept:
            # P(draft j accepted | all before) = α_s · decay^(j−1), α_s by output kind;
            # one uniform per sequence against the survival Π α_i of each prefix
            # (``self.surv``: the running product, as cumprod along the drafts
            # computes it, kept per slot).
            u = self.rng.random(n)
            surv = self.surv
            acc = (u < surv[0][idx]).astype(np.int64)
            for j in range(1, k):
                acc += u < surv[j][idx]
        elif self.alpha >= 1.0:
            acc = np.full(n, k, dtype=np.int64)
        elif self.alpha <= 0.0:
            acc = np.zeros(n, dtype=np.int64)
        else:
            acc = np.minimum(self.rng.geometric(1.0 - self.alpha, size=n) - 1, k)
        c = self.counters
        c.spec_drafts += n
        c.spec_draft_tokens += n * k
        c.spec_accepted += int(acc.sum())
        return np.asarray(acc + 1)

    def _complete_decode(
        self, plan: IterationPlan, end_ns: int, finished: list[SimRequest]
    ) -> None:
        """The decode step done: each sequence's tokens (a decode replica's new arrivals add
        their first), streamed, and the sequences that reached their length finished."""
        idx = plan.decode
        steps = self._draft_steps(idx, plan.k)
        if self.role == "decode":
            steps += self.bonus[idx]
            self.bonus[idx] = 0
            for req in plan.new:
                req.t_first_ns = end_ns
        rem = self.remaining[idx]
        steps = np.minimum(steps, rem)
        left = rem - steps
        self.remaining[idx] = left
        self.ctx[idx] += steps
        self.events[idx] += 1
        self.counters.generation_tokens += int(steps.sum())
        slots = self.slots
        if self.stream:
            for s, m in zip(idx.tolist(), steps.tolist(), strict=True):
                req = slots[s]
                if req is not None and req.on_emit is not None and m > 0 and not req.cancelled:
                    req.on_emit(req, m, end_ns)
        for s in idx[left == 0].tolist():
            req = slots[s]
            if req is not None:
                finished.append(req)

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
