"""The bootstrap's resampling shortcut gives exactly what building each sample would."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from agentperf.engine.metrics import percentile
from agentperf.engine.stats import _resampled_percentiles

values = st.one_of(
    st.floats(min_value=0, max_value=1e4, allow_nan=False), st.just(math.inf), st.just(0.0)
)


def _by_building_each_sample(
    groups: list[list[float]], p: float, resamples: int, rng: np.random.Generator
) -> list[float]:
    k = len(groups)
    out = []
    for _ in range(resamples):
        sample: list[float] = []
        for g in rng.integers(0, k, size=k):
            sample.extend(groups[g])
        if sample:
            out.append(percentile(sample, p))
    return out


@settings(max_examples=60, deadline=None)
@given(
    groups=st.lists(st.lists(values, max_size=6), min_size=1, max_size=30),
    p=st.sampled_from([0.0, 25.0, 50.0, 75.0, 90.0, 99.0, 100.0]),
    seed=st.integers(0, 2**16),
)
def test_resampled_percentiles_equal_those_of_the_concatenated_samples(groups, p, seed):
    expected = _by_building_each_sample(groups, p, 40, np.random.default_rng(seed))
    assert _resampled_percentiles(groups, p, 40, np.random.default_rng(seed)) == expected
