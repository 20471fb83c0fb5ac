"""`launcher.slurm` in the deployment config: accepted with the topology's roles, refused by
path where it cannot be launched (docs/pipeline.md "Slurm")."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agentperf.schema.deployment import validate_config
from agentperf.schema.loading import ConfigError

VR = (
    Path(__file__).resolve().parents[2]
    / "deploy"
    / "slurm"
    / "vera-rubin-3x2-prefill-8-decode.yaml"
)


def config() -> dict:
    return yaml.safe_load(VR.read_text())


def refused(data: dict) -> dict[str, list[str]]:
    with pytest.raises(ConfigError) as caught:
        validate_config(data)
    return caught.value.fields


def test_a_disaggregated_slurm_launch_with_its_frontend_is_accepted(settings):
    parsed = validate_config(config())
    assert parsed.launcher.kind == "slurm"
    assert parsed.accelerators_used == 14  # 3 × 2 prefill + 1 × 8 decode


def test_role_args_for_a_role_the_topology_lacks_are_refused_by_path(settings):
    data = config()
    data["topology"] = {
        "mode": "aggregated",
        "roles": [{**data["topology"]["roles"][1], "name": "both"}],
    }
    data["kv_cache"]["transfer"] = "none"
    fields = refused(data)
    assert "launcher.slurm.role_args.prefill" in fields, fields


def test_a_disaggregated_topology_needs_a_declared_frontend(settings):
    data = config()
    del data["launcher"]["slurm"]["frontend"]
    assert "launcher.slurm.frontend" in refused(data)


def test_an_unknown_option_is_refused_by_path(settings):
    data = config()
    data["launcher"]["slurm"]["nodes"] = 3
    assert refused(data) == {"launcher.slurm.nodes": ["unknown field"]}
