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


def _vr():
    import copy

    from agentperf.simulator import fit
    from agentperf.simulator.profile import profile_from_dict

    doc, path = fit.load_document("vr-nvl72-dsv41-flash")
    return doc, profile_from_dict(copy.deepcopy(doc), path=path), path


def test_a_profile_built_on_anothers_fit_carries_that_fits_uncertainty():
    """Vera Rubin's efficiencies are the fitted GB300 shares (`fit_from`): its band has the
    GB300 fit's ±1.96 σ pair, each of its values moved by the ratio the fitted one moved."""
    from agentperf.simulator import bands, fit
    from agentperf.simulator.profile import resolve_profile_path

    doc, prof, path = _vr()
    assert bands.fit_record(path) is None  # no fit of its own
    own = [s for s in bands.samples_for(prof, doc, None) if s.kind == "fit"]
    record = bands.fit_record(resolve_profile_path("gb300-nvl72-dsv41-flash"))
    theirs = bands.fit_samples(record)
    assert len(own) == len(theirs) == 2
    assert {p for p, _ in prof.fit_from.parameters} == set(own[0].values)
    for mine, gb300 in zip(own, theirs, strict=True):
        assert "gb300-nvl72-dsv41-flash" in mine.name
        for own_path, fitted_path in prof.fit_from.parameters:
            ratio = gb300.values[fitted_path] / record["free"][fitted_path]["fitted"]
            nominal = fit.get_path(doc, own_path)
            assert mine.values[own_path] == pytest.approx(nominal * ratio, rel=1e-5), own_path
    # the pair moves the values apart: not the nominal profile again
    assert own[0].values != own[1].values
    # the band names the record it borrowed, and the committed band was built with it
    summary = bands.fit_summary(prof, path, None)
    assert summary["record"] == "gb300-nvl72-dsv41-flash.fit.json"
    assert summary["borrowed"] == dict(prof.fit_from.parameters)
    committed = bands.stored_band("vr-nvl72-dsv41-flash")
    assert committed["fit"] == summary
    assert [s["name"] for s in committed["samples"] if s["kind"] == "fit"] == [s.name for s in own]


@pytest.mark.parametrize(
    ("fit_from", "named"),
    [
        ({"profile": "gb300-nvl72-dsv41-flash", "reason": "x", "parameters": {}}, "parameters"),
        (
            {
                "profile": "gb300-nvl72-dsv41-flash",
                "reason": "x",
                "parameters": {"deployment.nope": "a"},
            },
            "fit_from.parameters.deployment.nope",
        ),
        ({"profile": "gb300-nvl72-dsv41-flash", "parameters": {}}, "fit_from.reason"),
        ({"profile": "", "reason": "x", "parameters": {}}, "fit_from.profile"),
        ({"profile": "gb300-nvl72-dsv41-flash", "reason": "x", "extra": 1}, "extra"),
    ],
)
def test_a_malformed_fit_from_names_the_field(fit_from, named):
    import copy

    from agentperf.simulator.profile import ProfileError, profile_from_dict

    doc, _, path = _vr()
    bad = copy.deepcopy(doc)
    bad["fit_from"] = fit_from
    with pytest.raises(ProfileError, match=named.replace(".", r"\.")):
        profile_from_dict(bad, path=path)
