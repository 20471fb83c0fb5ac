"""Physics of the performance model, observed through the engine's transport on virtual time."""

from __future__ import annotations

import pytest

from agentperf.simulator.calibrate import decode_step_seconds
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


@pytest.mark.parametrize("by_kind", [False, True], ids=["one-acceptance", "by-output-kind"])
def test_a_fixed_seed_gives_identical_results_and_another_seed_differs(by_kind: bool):
    spec = tiny(spec_k=3, spec_acceptance=0.6)
    if by_kind:  # per-request kinds drawn from the mix, acceptance decaying along the draft
        spec = tiny(
            spec_k=3,
            spec_acceptance=0.6,
            spec_acceptance_by_kind=(("tool_call", 0.9), ("prose", 0.5)),
            spec_default_mix=(("tool_call", 0.5), ("prose", 0.5)),
            spec_position_decay=0.9,
        )

    def fingerprint(seed: int) -> list[tuple[str, int | None, int | None, int | None]]:
        s = run_agents(spec, agents=8, window_s=10.0, seed=seed)
        return [(e.request_id, e.t_first_ns, e.t_last_ns, e.cached_tokens) for e in s.exchanges]

    assert fingerprint(7) == fingerprint(7)
    assert fingerprint(7) != fingerprint(8)


def test_expert_parallel_all_to_all_adds_time_in_proportion_to_tokens_in_flight():
    import dataclasses

    from agentperf.simulator.cost import CostModel
    from agentperf.simulator.profile import load_profile

    # GB200: the disaggregated 56-GPU decode group (GB300 is now co-located, issue 13)
    prof = load_profile("gb200-nvl72-dsv41-flash")
    decode = prof.role("decode")
    per_token = 43 * 6 * 4096 * 3 * (1 - 1 / 56)  # bytes to other GPUs, per token per step
    assert prof.moe_comm_bytes_per_token(decode.ep) == pytest.approx(per_token)

    def step(p, seqs: int) -> tuple[float, float]:
        c = CostModel(p, decode).cost(
            prefill_tokens=0,
            prefill_attended=0.0,
            prefill_ctx_read=0,
            decode_seqs=seqs,
            verify=4,
            decode_ctx=seqs * 27_000,
            decode_attended=seqs * 2048.0,
            drafting=True,
        )
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
    from agentperf.simulator.calibrate import decode_batch_for_speed
    from agentperf.simulator.profile import load_profile

    prof = load_profile("gb200-nvl72-dsv41-flash")
    n = decode_batch_for_speed(prof, 82.0, context=27_000)
    assert n is not None

    def speed(batch: int) -> float:
        return prof.spec_tokens_per_step / decode_step_seconds(prof, batch=batch, context=27_000)

    assert speed(n) <= 82.0 < speed(n - 1)


# ----------------------------------------------------------------- issue 13: the real shape
def _spec_tiny(k: int, **changes: object):
    return tiny(
        spec_k=k,
        spec_acceptance=0.8,
        spec_position_decay=0.9,
        draft_step_us=50.0,
        **changes,
    )


def test_more_draft_tokens_raise_single_agent_speed_with_diminishing_returns_and_lower_acceptance():
    runs = {
        k: run_agents(_spec_tiny(k), agents=1, window_s=120.0, output_tokens=400)
        for k in (1, 2, 4, 8)
    }
    speeds = [runs[k].mean_speed for k in (1, 2, 4, 8)]
    gains = [b - a for a, b in zip(speeds, speeds[1:], strict=False)]
    assert speeds == sorted(speeds)  # more drafts: faster alone ...
    # ... by less each time: per added draft token the gain shrinks
    assert gains[0] > gains[1] / 2 > gains[2] / 4
    rates = [
        runs[k].counters.spec_accepted / runs[k].counters.spec_draft_tokens for k in (1, 2, 4, 8)
    ]
    assert rates == sorted(rates, reverse=True) and rates[0] > rates[-1] + 0.2
    # the measured acceptance of the first draft is the profile's own (0.8)
    assert rates[0] == pytest.approx(0.8, abs=0.04)


def test_tool_call_text_accepts_more_drafts_and_decodes_faster_than_prose():
    prof = _spec_tiny(4, spec_acceptance_by_kind=(("tool_call", 0.95), ("prose", 0.6)))
    tool = run_agents(prof, agents=1, window_s=60.0, output_tokens=400, output_kind="tool_call")
    prose = run_agents(prof, agents=1, window_s=60.0, output_kind="prose", output_tokens=400)
    expected = prof.tokens_per_step_at(0.95) / prof.tokens_per_step_at(0.6)
    assert tool.mean_speed / prose.mean_speed == pytest.approx(expected, rel=0.06)
    assert tool.counters.spec_accepted > 1.5 * prose.counters.spec_accepted


def test_co_located_prefill_slows_a_decode_step_in_proportion_to_its_chunk():
    from agentperf.simulator.cost import CostModel
    from agentperf.simulator.profile import load_profile

    prof = load_profile("gb300-nvl72-dsv41-flash")
    assert prof.mode == "aggregated"  # co-located: prefill chunks share decode iterations
    cm = CostModel(prof, prof.roles[0])

    def step(chunk: int) -> float:
        c = cm.cost(
            prefill_tokens=chunk,
            prefill_attended=chunk * 2048.0,
            prefill_ctx_read=30_000 + chunk,
            decode_seqs=2048,
            verify=5,
            decode_ctx=2048 * 30_000,
            decode_attended=2048 * 2048.0,
            drafting=True,
            prefill_full_attended=chunk * (30_000 + chunk / 2),
            prefill_seqs=1,
        )
        return c.seconds

    base = step(0)
    extra = [step(c) - base for c in (8192, 16384, 32768)]
    assert extra[0] > 0.05 * base  # a chunk is a visible share of the step
    assert extra[1] / extra[0] == pytest.approx(2.0, rel=0.15)
    assert extra[2] / extra[1] == pytest.approx(2.0, rel=0.15)


def test_small_per_expert_batches_run_far_below_peak_and_large_ones_near_it():
    from agentperf.simulator.cost import CostModel
    from agentperf.simulator.profile import load_profile

    prof = load_profile("gb300-nvl72-dsv41-flash")
    cm = CostModel(prof, prof.roles[0])
    g = [cm.gemm_efficiency(t) for t in (5, 1_000, 10_000, 100_000)]
    assert g == sorted(g) and g[0] < 0.02 and g[-1] > 0.9
    # the busiest of 72 EP ranks carries more than the mean, less so as tokens grow
    imb = [cm.imbalance(t) for t in (100, 10_000, 100_000)]
    assert imb == sorted(imb, reverse=True) and imb[-1] > 1.1


def test_gb300_sweep_is_monotone_and_reaches_60_tok_s_per_agent_or_less():
    from agentperf.simulator.calibrate import frontier_at, run_sweep
    from agentperf.simulator.profile import load_profile
    from tests.simulator.helpers import synthetic_trajectories

    prof = load_profile("gb300-nvl72-dsv41-flash")
    pts = run_sweep(
        prof,
        synthetic_trajectories(),
        concurrencies=(1, 512, 4096, 16384),
        warmup_s=30.0,
        ramp_s=15.0,
        duration_s=20.0,
    )
    speeds = [p.p25_speed for p in pts]
    tput = [p.throughput_per_accelerator for p in pts]
    assert speeds == sorted(speeds, reverse=True) and speeds[-1] <= 60.0
    assert tput == sorted(tput) and tput[-1] > 100 * tput[0]
    assert all(p.ttft_p75_s < 5.0 for p in pts)  # decode-bound, not a growing prefill queue
    # the frontier is read between measured trials
    mid = frontier_at(pts, (speeds[1] + speeds[2]) / 2)
    assert mid is not None and tput[1] < mid < tput[2]


def test_modelled_power_lies_between_idle_and_tdp_and_rises_with_load():
    prof = tiny(power_tdp_w=700.0, power_idle_fraction=0.3)
    powers = []
    for n in (1, 64):
        s = run_agents(prof, agents=n, window_s=20.0)
        # energy is counted from t = 0 to the end of the run
        end_s = max(e.t_last_ns or 0 for e in s.exchanges) / 1e9
        powers.append(prof.modelled_power_w(s.counters.energy_j, end_s))
    assert all(p is not None and 210.0 <= p <= 700.0 for p in powers)
    assert powers[1] > powers[0] + 50.0
    assert tiny().modelled_power_w(1.0, 1.0) is None  # no power section: not modelled
