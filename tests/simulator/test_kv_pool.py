"""The KV pool's per-prompt bookkeeping makes the decisions of plain per-block reference
counting with an LRU of released blocks (the reference below), operation for operation."""

from __future__ import annotations

from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from agentperf.simulator.kv import KvPool


class ReferencePool:
    """Per-block refcounts; released blocks enter an LRU tail first; eviction from its head."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.evictable = 0
        self.entries: dict[int, list[int]] = {}  # key -> [size, refs]
        self.lru: OrderedDict[int, None] = OrderedDict()

    def acquire(self, keys: tuple[int, ...], cum: tuple[int, ...], reserve: int) -> int | None:
        hits = []
        for k in keys:
            e = self.entries.get(k)
            if e is None:
                break
            hits.append(e)
        m = len(hits)
        matched = cum[m - 1] if m else 0
        need = cum[-1] - matched + reserve
        repinned = sum(e[0] for e in hits if e[1] == 0)
        if self.capacity - self.used + self.evictable - repinned < need:
            return None
        for k, e in zip(keys, hits, strict=False):
            if e[1] == 0:
                del self.lru[k]
                self.evictable -= e[0]
            e[1] += 1
        while self.capacity - self.used < need and self.lru:
            k, _ = self.lru.popitem(last=False)
            size = self.entries.pop(k)[0]
            self.used -= size
            self.evictable -= size
        prev = matched
        for i in range(m, len(keys)):
            e = self.entries.get(keys[i])
            if e is None:
                self.entries[keys[i]] = [cum[i] - prev, 1]
                self.used += cum[i] - prev
            else:
                if e[1] == 0:
                    del self.lru[keys[i]]
                    self.evictable -= e[0]
                e[1] += 1
            prev = cum[i]
        self.used += reserve
        return matched

    def release(self, keys: tuple[int, ...], reserve: int) -> None:
        self.used -= reserve
        for k in reversed(keys):
            e = self.entries[k]
            e[1] -= 1
            if not e[1]:
                self.lru[k] = None
                self.evictable += e[0]


def _chain(session: int, length: int, sizes: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Keys and cumulative tokens of the first ``length`` blocks of a session's chain; block 0
    is shared by every session (a tools block), the others are the session's own."""
    keys = tuple(0 if i == 0 else session * 1000 + i for i in range(length))
    cum: list[int] = []
    total = 0
    for i in range(length):
        total += sizes[0] if i == 0 else sizes[(session * 7 + i) % len(sizes)]
        cum.append(total)
    return keys, tuple(cum)


operations = st.lists(
    st.tuples(
        st.sampled_from(["acquire", "release"]),
        st.integers(0, 5),  # session
        st.integers(1, 12),  # prompt length in blocks
        st.integers(0, 40),  # reserve
    ),
    min_size=1,
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(
    ops=operations,
    capacity=st.integers(50, 600),
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=6),
    compact=st.booleans(),
    sessions=st.booleans(),
)
def test_the_pool_decides_exactly_as_per_block_reference_counting(
    ops, capacity, sizes, compact, sessions
):
    """``compact``: the release log is compacted after every operation (it normally is
    every few thousand releases); ``sessions``: acquires name their session, so the pool
    skips lookups of blocks the session's previous prompt had. Neither may change a
    decision."""
    pool, ref = KvPool(capacity, caching=True), ReferencePool(capacity)
    held: list[tuple[tuple[int, ...], int]] = []  # (keys, reserve) of pinned prompts
    for op, session, length, reserve in ops:
        if op == "release":
            if not held:
                continue
            keys, r = held.pop(session % len(held))
            pool.release(keys, r)
            ref.release(keys, r)
        else:
            keys, cum = _chain(session, length, sizes)
            got = pool.acquire(keys, cum, reserve, session + 1 if sessions else 0)
            want = ref.acquire(keys, cum, reserve)
            assert got == want
            if got is not None:
                held.append((keys, reserve))
        if compact:
            pool._compact()
        assert pool.used == ref.used
        assert pool.in_use == ref.used - ref.evictable
        assert set(pool.sizes) == set(ref.entries)


def test_a_sessions_blocks_evicted_since_its_last_prompt_are_looked_up_again():
    pool, ref = KvPool(100, caching=True), ReferencePool(100)
    a, a_cum = _chain(1, 4, [20])  # 80 tokens: the tools block and three of session 1's
    b, b_cum = _chain(2, 4, [25])  # 20 + 75 tokens: needs most of session 1's blocks gone
    for keys, cum, session in ((a, a_cum, 1), (b, b_cum, 2), (a, a_cum, 1)):
        got, want = pool.acquire(keys, cum, 0, session), ref.acquire(keys, cum, 0)
        assert got == want
        pool.release(keys, 0)
        ref.release(keys, 0)
    assert pool.evictions > 0 and set(pool.sizes) == set(ref.entries)
