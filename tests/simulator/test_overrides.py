"""A simulated deployment's profile overrides (docs/simulator.md "Overrides"): a JSON Merge
Patch of the profile's deployment section, checked by the profile's rules, served by the
simulated launcher on either clock and named by field when it does not fit."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agentperf.schema.deployment import validate_config
from agentperf.schema.loading import ConfigError
from agentperf.simulator.profile import (
    OVERRIDE_SOURCE,
    ProfileError,
    load_profile,
    load_profile_with,
    profile_document,
)
from runner.launchers.simulated import SimulatedLauncher
from tests.simulator.helpers import run_agents

SLOWER = {"efficiency": {"iteration_overhead_us": 4000}}


def test_an_override_changes_only_the_patched_parameter_and_sources_it() -> None:
    plain, slow = load_profile("tiny"), load_profile_with("tiny", SLOWER)
    assert slow.iteration_overhead_us == 4000 != plain.iteration_overhead_us
    assert slow.compute_efficiency == plain.compute_efficiency
    assert (slow.label, slow.served_model_names) == (plain.label, plain.served_model_names)
    doc = profile_document("tiny", SLOWER)
    assert doc["sources"]["deployment.efficiency.iteration_overhead_us"] == OVERRIDE_SOURCE
    assert doc["system"] == profile_document("tiny")["system"]  # what it simulates stays


def test_an_overridden_profile_is_slower_on_virtual_time() -> None:
    plain = run_agents(load_profile("tiny"), agents=1, window_s=60.0, output_tokens=200)
    slow = run_agents(load_profile_with("tiny", SLOWER), agents=1, window_s=60.0, output_tokens=200)
    # a decode step is ~5 ms of weights plus the fixed overhead: 1 ms → 4 ms is ~6 → ~9 ms
    assert slow.mean_speed / plain.mean_speed == pytest.approx(6 / 9, rel=0.05)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"efficiency": {"compute": -1}}, "deployment.efficiency.compute"),
        ({"bogus": 1}, "bogus"),
        ({"aggregated": {"tp": "two"}}, "deployment.aggregated.tp"),
        # the hostile findings: each asked the twin for unbounded memory or time
        ({"speculative": {"k": 1_000_000_000}}, "deployment.speculative.k"),
        ({"efficiency": {"iteration_overhead_us": 1e12}}, "iteration_overhead_us"),
        ({"eos": {"mean_tokens": 1e9}}, "deployment.eos.mean_tokens"),
        ({"aggregated": {"replicas": 10**9}}, "deployment.aggregated.replicas"),
        ({"aggregated": {"max_batch": 10**9}}, "deployment.aggregated.max_batch"),
        ({"scheduler": {"step_us": 1e12}}, "deployment.scheduler.step_us"),
    ],
)
def test_an_override_that_does_not_fit_names_its_field(overrides, named) -> None:
    with pytest.raises(ProfileError, match=named.replace(".", r"\.")):
        load_profile_with("tiny", overrides)


def test_the_launcher_serves_the_patched_profile_on_virtual_time(tmp_path) -> None:
    config = {"profile": "tiny", "served_model_name": "tiny-1b", "overrides": SLOWER}
    launcher = SimulatedLauncher({**config, "clock": "virtual"}, log_dir=str(tmp_path))
    endpoint = launcher.start()
    assert endpoint.sim_profile is not None and endpoint.sim_profile.endswith(".yaml")
    served = load_profile(endpoint.sim_profile)
    assert served.iteration_overhead_us == 4000
    assert yaml.safe_load(open(endpoint.sim_profile))["name"] == "tiny"
    assert endpoint.info["profile"] == "tiny"


def test_the_real_time_server_runs_the_patched_profile(tmp_path) -> None:
    config = {"profile": "tiny", "served_model_name": "tiny-1b", "overrides": SLOWER}
    launcher = SimulatedLauncher({**config, "clock": "real"}, log_dir=str(tmp_path))
    endpoint = launcher.start()
    try:
        assert endpoint.base_url and endpoint.info["models"] == ["tiny-1b"]
        assert launcher.server is not None
        args = [str(a) for a in launcher.server.proc.args]  # type: ignore[union-attr]
        served = args[args.index("--profile") + 1]
        assert load_profile(served).iteration_overhead_us == 4000
    finally:
        launcher.stop()
    # it stopped on SIGTERM and closed cleanly (not killed after the grace period), also
    # when the suite runs as a background job
    assert launcher.server.proc.returncode == 0


def test_a_config_whose_overrides_ask_for_unbounded_work_is_refused_naming_the_field() -> None:
    """The hostile finding: `launcher.simulated.overrides: {speculative: {k: 1e9}}` was
    accepted with a 201 and took the worker to 5.7 GB; the vendor API validates a config
    with validate_config, which names the patched field."""
    examples = Path(__file__).resolve().parents[2] / "docs" / "examples"
    doc = yaml.safe_load((examples / "simulated.yaml").read_text())
    doc["launcher"]["simulated"]["overrides"] = {"speculative": {"k": 1_000_000_000}}
    with pytest.raises(ConfigError) as refused:
        validate_config(doc)
    assert list(refused.value.fields) == ["launcher.simulated.overrides.speculative.k"]
    assert "must be ≤ 64" in refused.value.fields["launcher.simulated.overrides.speculative.k"][0]


def test_overrides_that_put_the_twin_on_other_gpus_than_the_topology_are_refused() -> None:
    """The hostile finding: `aggregated.accelerators: 7` under a topology of 8 was accepted,
    and every per-accelerator figure would have divided the twin's 7 GPUs' output by 8.
    Overrides that change the GPUs to the topology's pass (the co-located ladder rung)."""
    examples = Path(__file__).resolve().parents[2] / "docs" / "examples"
    doc = yaml.safe_load((examples / "simulated.yaml").read_text())
    assert validate_config(doc).accelerators_used == 8
    doc["launcher"]["simulated"]["overrides"] = {"aggregated": {"accelerators": 7}}
    with pytest.raises(ConfigError) as refused:
        validate_config(doc)
    (message,) = refused.value.fields["launcher.simulated.overrides"]
    assert "serves on 7 accelerators" in message and "the topology on 8" in message
    doc["launcher"]["simulated"]["overrides"] = {"aggregated": {"tp": 4}}  # the same 8 GPUs
    assert validate_config(doc).launcher.simulated.overrides is not None
