"""Physics of the performance model, observed through the engine's transport on virtual time."""

from __future__ import annotations

import pytest

from runner.simulator.calibrate import decode_step_seconds
from tests.simulator.helpers import max_agents_at, run_agents, tiny


def test_throughput_per_accelerator_rises_while_per_agent_speed_falls_along_a_concurrency_sweep():
    sweep = [run_agents(tiny(), agents=n) for n in (1, 4, 16, 64)]
    speeds = [s.p25_speed for s in sweep]
    throughputs = [s.throughput_per_accelerator for s in sweep]
    assert speeds == sorted(speeds, reverse=True) and speeds[0] > 2 * speeds[-1]
    assert throughputs == sorted(throughputs) and throughputs[-1] > 5 * throughputs[0]


def test_prefix_caching_raises_throughput_on_multi_turn_trajectories_and_reports_cache_hits():
    cached = run_agents(tiny(), agents=64, first_tokens=4000)
    uncached = run_agents(tiny(prefix_caching=False), agents=64, first_tokens=4000)
    assert cached.throughput_per_accelerator > 1.3 * uncached.throughput_per_accelerator
    later_turns = [ex for ex in cached.exchanges if not ex.request_id.endswith("-t0")]
    assert later_turns and all(ex.cached_tokens and ex.cached_tokens > 4000 for ex in later_turns)
    assert all(ex.cached_tokens == 0 for ex in uncached.exchanges)
    assert cached.cached_ratio > 0.5


def test_speculative_decoding_raises_single_agent_speed_by_the_expected_factor():
    plain = tiny()
    spec = tiny(spec_k=3, spec_acceptance=0.7, draft_step_us=100.0)
    expected = (
        spec.spec_tokens_per_step
        * decode_step_seconds(plain, batch=1, context=2500)
        / decode_step_seconds(spec, batch=1, context=2500)
    )
    assert spec.spec_tokens_per_step == pytest.approx((1 - 0.7**4) / (1 - 0.7))
    fast = run_agents(spec, agents=1, window_s=120.0, output_tokens=400)
    slow = run_agents(plain, agents=1, window_s=120.0, output_tokens=400)
    assert fast.mean_speed / slow.mean_speed == pytest.approx(expected, rel=0.05)
    assert fast.mean_speed / slow.mean_speed > 2.0


def test_more_kv_bytes_per_token_lowers_the_max_agents_at_a_tier():
    candidates = [8, 16, 24, 32, 48, 64, 96, 128]
    light = max_agents_at(tiny(), speed=60.0, candidates=candidates)
    heavy = max_agents_at(tiny(kv_bytes_per_token=4 * 16384), speed=60.0, candidates=candidates)
    assert 0 < heavy < light


def test_a_fixed_seed_gives_identical_results_and_another_seed_differs():
    spec = tiny(spec_k=3, spec_acceptance=0.6)

    def fingerprint(seed: int) -> list[tuple[str, int | None, int | None, int | None]]:
        s = run_agents(spec, agents=8, window_s=10.0, seed=seed)
        return [(e.request_id, e.t_first_ns, e.t_last_ns, e.cached_tokens) for e in s.exchanges]

    assert fingerprint(7) == fingerprint(7)
    assert fingerprint(7) != fingerprint(8)


def test_expert_parallel_all_to_all_adds_time_in_proportion_to_tokens_in_flight():
    import dataclasses

    from runner.simulator.model import CostModel
    from runner.simulator.profile import load_profile

    prof = load_profile("gb300-nvl72-dsv41-flash")
    decode = prof.role("decode")
    per_token = 43 * 6 * 4096 * 3 * (1 - 1 / 56)  # bytes to other GPUs, per token per step
    assert prof.moe_comm_bytes_per_token(decode.ep) == pytest.approx(per_token)

    def step(p, seqs: int) -> tuple[float, float]:
        c = CostModel(p, decode).cost(
            prefill_tokens=0, prefill_attended=0.0, prefill_ctx_read=0, decode_seqs=seqs,
            verify=4, decode_ctx=seqs * 27_000, decode_attended=seqs * 2048.0, drafting=True,
        )  # fmt: skip
        return c.seconds, c.comm_s

    small, big = step(prof, 10), step(prof, 4000)
    # one GPU's share of the bytes over one NVLink direction at the assumed efficiency
    assert big[1] == pytest.approx(4000 * 4 / 56 * per_token / (900e9 * 0.5))
    assert big[1] == pytest.approx(400 * small[1])
    without = dataclasses.replace(prof, moe_comm_layers=0)
    assert step(without, 4000)[0] == pytest.approx(big[0] - big[1])
    hidden = dataclasses.replace(prof, moe_comm_overlap=True)
    assert step(hidden, 4000)[0] < big[0]  # overlapped: hidden under compute at this batch


def test_show_reports_the_smallest_decode_batch_that_slows_agents_to_a_speed():
    from runner.simulator.calibrate import decode_batch_for_speed
    from runner.simulator.profile import load_profile

    prof = load_profile("gb300-nvl72-dsv41-flash")
    n = decode_batch_for_speed(prof, 82.0, context=27_000)
    assert n is not None

    def speed(batch: int) -> float:
        return prof.spec_tokens_per_step / decode_step_seconds(prof, batch=batch, context=27_000)

    assert speed(n) <= 82.0 < speed(n - 1)
