"""KV memory of one replica: the prefix cache and the output reservations (``KvPool``).

The scheduler (``agentperf.simulator.scheduler``) admits a request only when its prompt's blocks
and its output room fit here; the rules: docs/simulator.md "The model" (KV memory).
"""

from __future__ import annotations

import itertools
import operator
from collections import deque
from collections.abc import Sequence
from typing import Any


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
