"""Mean-field slices of a simulated deployment (docs/simulator.md "Mean-field trials"): what
a 1/k slice keeps, that one iteration of it costs what the whole rack's does when every
rank carries the same work, and that its ghost ranks stand for the rest of the rack."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest

from agentperf.simulator.cost import CostModel
from agentperf.simulator.deployment import Deployment
from agentperf.simulator.profile import load_profile
from agentperf.simulator.scheduler import GHOST_STEPS, Replica
from agentperf.simulator.virtual import SimTransport
from tests.support import dishonest

RACK = "gb300-nvl72-dsv41-flash"


class _Timeline:
    def now_ns(self) -> int:
        return 0

    def call_at(self, t_ns: int, fn: object) -> None:
        raise AssertionError("nothing is scheduled here")


def test_a_slice_of_the_rack_keeps_its_share_of_ranks_batch_chunk_budget_and_kv_cache() -> None:
    whole = load_profile(RACK)
    (role,) = whole.roles
    # the divisors of its 72 ranks that leave a slice MIN_SLICE_RANKS (8) ranks or more
    assert whole.mean_field_factors() == (1, 2, 3, 4, 6, 8, 9)
    part = whole.thinned(8)
    (sliced,) = part.roles
    assert (sliced.accelerators, sliced.dp, sliced.max_batch) == (9, 9, role.max_batch // 8)
    assert sliced.chunk_tokens == role.chunk_tokens // 8
    # one request's prefill chunk and the expert-parallel group are the whole rack's
    assert sliced.request_chunk_tokens == role.request_chunk_tokens == 8192
    assert sliced.ep == role.ep == 72 and sliced.mean_field == 8
    assert part.accelerators_used == 9
    assert part.kv_capacity_tokens(sliced) == whole.kv_capacity_tokens(role) // 8
    # a request too long for the whole rack's cache is refused by the slice the same way
    assert Deployment(part, _Timeline()).max_prompt_tokens // 8 == part.kv_capacity_tokens(sliced)
    with pytest.raises(ValueError, match="cannot be cut into 5 equal slices"):
        whole.thinned(5)
    with pytest.raises(ValueError, match="cannot be cut into 12 equal slices"):
        whole.thinned(12)  # 6 ranks: too few for the ghost ranks to draw from
    with pytest.raises(ValueError, match="cannot be cut"):
        part.thinned(2)  # a slice is not sliced again


def test_a_disaggregated_rack_keeps_a_share_of_its_prefill_replicas_and_decode_ranks() -> None:
    whole = load_profile("gb300-nvl72-dsv41-flash-oct08")
    prefill, decode = whole.roles
    assert whole.mean_field_factors() == (1, 2, 4)  # 4 prefill replicas, 56 decode ranks
    p, d = whole.thinned(4).roles
    assert (p.replicas, p.accelerators, p.mean_field) == (prefill.replicas // 4, 4, 1)
    assert (d.replicas, d.accelerators, d.mean_field) == (1, decode.accelerators // 4, 4)


@pytest.mark.parametrize("prefill_tokens", [0, 8192])
@pytest.mark.parametrize("decode_seqs", [9, 900])
def test_an_iteration_of_a_slice_costs_what_the_whole_racks_does_with_the_same_rank_work(
    prefill_tokens: int, decode_seqs: int
) -> None:
    whole = load_profile(RACK)
    k = 8
    part = whole.thinned(k)
    full_cost = CostModel(whole, whole.roles[0])
    part_cost = CostModel(part, part.roles[0])
    # the slice carries 1/k of every sum; the busiest rank's own work is the same
    work = {
        "prefill_tokens": prefill_tokens,
        "prefill_attended": 2048.0 * prefill_tokens,
        "prefill_ctx_read": 3 * prefill_tokens,
        "decode_seqs": decode_seqs,
        "verify": 5,
        "decode_ctx": 30_000 * decode_seqs,
        "decode_attended": 2048.0 * decode_seqs,
        "prefill_full_attended": 20_000.0 * prefill_tokens,
        "prefill_seqs": 9 if prefill_tokens else 0,
    }
    rank_s = 0.004
    whole_it = full_cost.cost(
        **{key: value * k for key, value in work.items() if key != "verify"},
        verify=5,
        drafting=True,
        rank_s=rank_s,
    )
    part_it = part_cost.cost(**work, drafting=True, rank_s=rank_s)  # type: ignore[arg-type]
    assert part_it.seconds == pytest.approx(whole_it.seconds, rel=1e-12)
    assert part_it.gemm_efficiency == pytest.approx(whole_it.gemm_efficiency, rel=1e-12)
    assert part_it.imbalance == pytest.approx(whole_it.imbalance, rel=1e-12)
    # without the whole rack's tokens the slice's experts would see k times fewer tokens
    naive = CostModel(whole, dataclasses.replace(part.roles[0], mean_field=1))
    naive_it = naive.cost(**work, drafting=True, rank_s=rank_s)  # type: ignore[arg-type]
    assert naive_it.seconds != pytest.approx(whole_it.seconds, rel=1e-3)


def test_the_ghost_ranks_draw_the_busiest_of_the_whole_racks_ranks_from_the_slices_history() -> (
    None
):
    part = load_profile(RACK).thinned(8)
    replica = Replica(Deployment(part, _Timeline()), part.roles[0], 0, np.random.default_rng(0))
    dp = part.roles[0].dp
    assert replica.ghosts == 72 - dp
    quiet = np.full(dp, 0.001)
    assert replica._ghost_max(quiet) == 0.001
    # one rank of one step was busy: with 63 ghosts drawing from a short history that step
    # is drawn again (the rest of the rack's ranks are like the slice's)
    busy = quiet.copy()
    busy[3] = 0.010
    assert replica._ghost_max(busy) == 0.010
    seen = [replica._ghost_max(quiet) for _ in range(3)]
    assert max(seen) == 0.010
    # once the busy step has left the history (GHOST_STEPS iterations), it is never drawn
    later = [replica._ghost_max(quiet) for _ in range(GHOST_STEPS + 5)]
    assert later[-1] == 0.001


def test_a_dishonest_simulator_is_never_sliced() -> None:
    async def factors() -> tuple[tuple[int, ...], tuple[int, ...]]:
        honest = SimTransport(load_profile(RACK), timeline=_Timeline())  # type: ignore[arg-type]
        cheat = SimTransport(
            load_profile(RACK),
            timeline=_Timeline(),  # type: ignore[arg-type]
            behaviour=dishonest.parse("fewer_accelerators"),
        )
        return honest.mean_field_factors(), cheat.mean_field_factors()

    honest, cheat = asyncio.run(factors())
    assert 8 in honest and cheat == (1,)
