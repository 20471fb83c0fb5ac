"""Decode-heavy work on the twin (issue #28 item 3; docs/datasets.md "Decode-heavy
variant"): the generator's long-output sessions replayed against the simulated tiny system
on virtual time, judged by the catalog's decode-heavy tier set; a ladder may generate its
dataset in that shape."""

from __future__ import annotations

import pytest

from agentperf.catalog_data import load_catalog
from agentperf.engine.datasets.corpus import build_corpus
from agentperf.engine.datasets.synthetic import DECODE_HEAVY, generate_dataset
from agentperf.engine.jobs import Target, trial_job
from agentperf.engine.replay import ReplayConfig
from agentperf.engine.tokens import TokenCounter
from agentperf.engine.trial import TrialConfig, parse_tiers
from agentperf.ladder.measure import _load_dataset
from agentperf.ladder.spec import LadderError, parse_ladder
from tests.engine.test_ladder import tiny_ladder


def test_decode_heavy_sessions_on_the_twin_are_judged_by_sustained_speed():
    counter = TokenCounter()
    corpus = build_corpus(counter, discover=False)
    data = generate_dataset(
        seed=3, trajectories=8, corpus=corpus, counter=counter, params=DECODE_HEAVY
    )
    tiers = parse_tiers(load_catalog().tier_set("agentperf-decode-heavy-v1")["tiers"])
    config = TrialConfig(
        concurrency=4,
        warmup_s=20,
        duration_s=180,
        accelerators=1,
        min_requests=5,
        bootstrap_resamples=0,
        replay=ReplayConfig(model="tiny-1b", ramp_s=10, prime_cache=True),
    )
    result = trial_job(
        target=Target(sim_profile="tiny"),
        trajectories=data.trajectories,
        config=config,
        tiers=tiers,
    )
    measured = [r for r in result.records if r.ok and r.t_first_ns is not None]
    assert len(measured) >= 5
    # every answer is long: the recorded 2k-16k tokens, streamed in full
    assert all(r.n_out == r.target_output_tokens >= 2_048 for r in measured)
    # tiny streams ~160 tok/s alone; four long decodes at once share it
    speed = result.summary.p25_output_speed
    assert 40 < speed < 170
    verdicts = {name: v.passed for name, v in result.verdicts.items()}
    assert verdicts["sustained 20 tok/s"] and verdicts["sustained 40 tok/s"]
    assert not verdicts["sustained 150 tok/s"]


def test_a_ladder_may_generate_its_dataset_in_the_decode_heavy_shape():
    doc = tiny_ladder(dataset={"generate": {"seed": 1, "trajectories": 4, "shape": "decode-heavy"}})
    spec = parse_ladder(doc)
    trajectories = _load_dataset(spec, spec.dataset, {})
    outputs = [u.target_output_tokens for t in trajectories for u in t.turns]
    assert len(trajectories) == 4 and min(outputs) >= 2_048
    with pytest.raises(LadderError, match="generate.shape"):
        parse_ladder(tiny_ladder(dataset={"generate": {"seed": 1, "shape": "poetry"}}))
