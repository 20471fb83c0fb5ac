"""The open-loop search on the twin (issue #28 item 2; docs/engine.md "Arrival modes"):
sessions arriving as a Poisson process against the simulated tiny system on virtual time,
searched over the arrival rate with the closed loop's ramp, bisection and confirmation."""

from __future__ import annotations

from agentperf.engine.jobs import Target, search_job
from agentperf.engine.openloop import open_loop_summary, steps_for
from agentperf.engine.replay import ARRIVAL_OPEN, ReplayConfig
from agentperf.engine.search import PHASE_BISECT, PHASE_CONFIRM
from agentperf.engine.trial import TrialConfig
from tests.simulator.test_search_virtual import TIERS, _trajectories

STEP = 8.0  # sessions per minute per search step


def test_the_open_loop_search_finds_the_highest_rate_per_tier_on_virtual_time():
    base = TrialConfig(
        concurrency=1,
        warmup_s=30,
        duration_s=60,
        accelerators=1,
        min_requests=20,
        bootstrap_resamples=200,
        replay=ReplayConfig(model="tiny-1b", arrival=ARRIVAL_OPEN),
    )
    result = search_job(
        target=Target(sim_profile="tiny"),
        trajectories=_trajectories(),
        tiers=TIERS,
        base=base,
        cap=steps_for(2048.0, STEP),
        rate_step=STEP,
    )
    doc = open_loop_summary(result, STEP)
    rates = {name: t["max_rate_per_min"] for name, t in doc["tiers"].items()}
    # tiny streams ~160 tok/s alone: the 180 and 300 tok/s tiers fail at any rate ...
    assert rates["180"] == 0 and rates["300"] == 0
    # ... the others pass at a rate below the cap, stricter tiers never at a higher one
    assert 0 < rates["100"] <= rates["60"] <= rates["20"] < 2048
    trials = result.trials
    assert all(t.data["simulated"] for t in trials)
    assert all(t.data["arrival"]["mode"] == ARRIVAL_OPEN for t in trials)
    assert {t.phase for t in trials} >= {PHASE_BISECT, PHASE_CONFIRM}
    for t in trials:  # every trial ran at its rate, with the sessions of its horizon
        assert t.data["arrival"]["rate_per_min"] == t.concurrency * STEP
        assert t.data["config"]["replay"]["rate_per_min"] == t.concurrency * STEP
    # more arrivals, more sessions at once: the load the rate produced is reported
    by_rate = sorted({t.concurrency: t for t in trials}.items())
    means = [t.data["arrival"]["concurrent_sessions"]["mean"] for _, t in by_rate]
    assert means[-1] > 4 * means[0]
    for name in ("20", "60", "100"):
        tier = doc["tiers"][name]
        assert tier["confirmed"]
        assert 0 < tier["mean_concurrent_sessions"] <= tier["peak_concurrent_sessions"]
        assert tier["ttft_s"]["p75"] <= 10.0
