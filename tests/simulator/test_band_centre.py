"""The fit's uncertainty samples are taken around the profile's own values (docs/simulator.md
"Bands"): a band is applied as ratios to the profile's nominal frontier, so a profile that
does not (yet) carry its fit record's values must still get a band centred on itself."""

from __future__ import annotations

import pytest

from agentperf.simulator.bands import fit_samples


def _record() -> dict:
    return {
        "free": {
            "deployment.efficiency.compute": {"bounds": [0.1, 1.0], "fitted": 0.6},
            "deployment.efficiency.iteration_overhead_us": {"bounds": [500, 5000], "fitted": 2300},
        },
        # a widest axis along the first parameter
        "covariance_matrix": [[0.0081, 0.0], [0.0, 100.0]],
    }


def test_the_fit_samples_are_symmetric_around_the_profiles_own_values():
    doc = {"deployment": {"efficiency": {"compute": 0.5, "iteration_overhead_us": 2100}}}
    plus, minus = fit_samples(_record(), doc)
    for key, here in (
        ("deployment.efficiency.compute", 0.5),
        ("deployment.efficiency.iteration_overhead_us", 2100),
    ):
        assert (plus.values[key] + minus.values[key]) / 2 == pytest.approx(here, rel=1e-3), key
    assert plus.values["deployment.efficiency.compute"] > 0.5


def test_without_the_profile_the_samples_are_around_the_record():
    plus, minus = fit_samples(_record())
    centre = (
        plus.values["deployment.efficiency.compute"] + minus.values["deployment.efficiency.compute"]
    ) / 2
    assert centre == pytest.approx(0.6, rel=1e-3)
