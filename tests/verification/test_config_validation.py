"""Submission validation refuses configs that fake speculative acceptance, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from submissions.schema import ConfigError, parse_config

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "process.yaml"


def _with(**changes) -> str:
    doc = yaml.safe_load(EXAMPLE.read_text())
    for path, value in changes.items():
        node = doc
        *parents, last = path.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return yaml.safe_dump(doc)


def test_the_example_config_is_accepted():
    assert parse_config(_with(), "application/yaml").engine.name


def test_an_env_var_that_forces_acceptance_is_refused_at_its_path():
    with pytest.raises(ConfigError) as exc:
        parse_config(_with(env={"SGLANG_SIMULATE_ACC_LEN": "3"}), "application/yaml")
    assert "env.SGLANG_SIMULATE_ACC_LEN" in exc.value.fields
    assert "fakes speculative acceptance" in exc.value.fields["env.SGLANG_SIMULATE_ACC_LEN"][0]


def test_a_synthetic_rejection_sampler_in_the_launch_args_is_refused():
    args = ["--speculative-config", '{"method": "mtp", "rejection_sample_method": "synthetic"}']
    with pytest.raises(ConfigError) as exc:
        launch = {
            "command": "vllm",
            "args": ["serve", *args],
            "port": 8000,
            "served_model_name": "m",
        }
        parse_config(_with(launch=launch), "application/yaml")
    assert "launch.args.2" in exc.value.fields
