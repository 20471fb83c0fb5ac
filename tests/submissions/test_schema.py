import copy
import json
from pathlib import Path

import jsonschema
import pytest
from django.test import override_settings

from agentperf.schema.__main__ import DEFAULT_PATH, render
from submissions.schema import ConfigError, DeploymentConfig, parse_config
from tests.submissions.configs import EXAMPLES, as_json, as_yaml, example

EXAMPLE_NAMES = [
    "attached",
    "container",
    "gb300-nvl72-dry-run",
    "process",
    "simulated",
    "simulated-open-loop",
    "vllm-container",
    "vllm-process",
]
# examples named for what they show rather than for their launcher
LAUNCHER_OF = {
    "gb300-nvl72-dry-run": "simulated",
    "simulated-open-loop": "simulated",
    "vllm-container": "container",
    "vllm-process": "process",
}


def errors_of(doc, content_type="application/json") -> dict[str, list[str]]:
    text = as_json(doc) if content_type == "application/json" else as_yaml(doc)
    with pytest.raises(ConfigError) as info:
        parse_config(text, content_type)
    return info.value.fields


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_each_shipped_example_validates_and_names_its_launcher(name):
    config = parse_config((EXAMPLES / f"{name}.yaml").read_text(), "application/yaml")
    assert config.launcher.kind == LAUNCHER_OF.get(name, name)
    assert config.accelerators_used >= 1


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_each_shipped_example_also_satisfies_the_published_json_schema(name):
    schema = json.loads(DEFAULT_PATH.read_text())
    jsonschema.Draft202012Validator(schema).validate(json.loads(as_json(example(name))))


def test_the_simulated_example_targets_deepseek_v41_flash_on_a_shipped_profile():
    from agentperf.simulator.profile import available_profiles

    config = parse_config((EXAMPLES / "simulated.yaml").read_text(), "application/yaml")
    assert config.model.id == "deepseek-v4.1-flash-max"
    assert config.launcher.simulated.profile in available_profiles()
    assert config.is_simulated


def test_the_process_example_runs_llamacpp_on_the_local_cpu():
    config = parse_config((EXAMPLES / "process.yaml").read_text(), "application/yaml")
    assert config.engine.name == "llamacpp"
    assert config.hardware == "local-cpu"
    assert config.launcher.process is not None
    assert config.launch is not None and config.launch.command == "python"
    assert config.launch.args[:2] == ["-m", "runner.launchers.llamacpp_server"]


def test_an_old_config_with_a_second_launch_description_is_refused_naming_each_field():
    doc = example("process")
    doc["launcher"] = {
        "process": {"command": ["python", "-m", "x"], "port": 18431, "served_model_name": "m"}
    }
    fields = errors_of(doc)
    assert set(fields) == {"launcher.process.command"}  # the first moved field it meets
    assert "moved to launch.command and launch.args" in fields["launcher.process.command"][0]
    doc["launcher"] = {"container": {"env": {"A": "1"}}}
    fields = errors_of(doc)
    assert list(fields) == ["launcher.container.env"]
    assert "moved to env" in fields["launcher.container.env"][0]


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda d: d["launch"].pop("port"), "launch.port"),
        (lambda d: d["launch"].pop("served_model_name"), "launch.served_model_name"),
        (lambda d: d.pop("launch"), "launch"),
        (lambda d: d["launch"].update(command="python -m server"), "launch.command"),
        (lambda d: d["engine"].pop("image"), "engine.image"),
        (lambda d: d["engine"].update(image="registry.example/llamacpp:latest"), "engine.image"),
    ],
    ids=["port", "model-name", "no-launch", "command-with-args", "no-image", "tag-only-image"],
)
def test_a_container_launch_needs_the_whole_launch_and_a_pinned_image(change, path):
    doc = example("container")
    change(doc)
    assert list(errors_of(doc)) == [path]


def test_the_checked_in_json_schema_is_current():
    assert DEFAULT_PATH.read_text() == render(), "run: python -m agentperf.schema"


def test_json_and_yaml_bodies_give_the_same_config():
    doc = example("attached")
    from_json = parse_config(as_json(doc), "application/json")
    from_yaml = parse_config(as_yaml(doc), "application/x-yaml; charset=utf-8")
    assert from_json.model_dump() == from_yaml.model_dump()


def test_an_unknown_field_is_rejected_at_its_path():
    doc = example("attached")
    doc["topology"]["roles"][1]["turbo"] = True
    assert errors_of(doc) == {"topology.roles.1.turbo": ["unknown field"]}


def test_an_unknown_top_level_field_is_rejected():
    doc = example("simulated")
    doc["max_agents_claimed"] = 5000
    assert list(errors_of(doc)) == ["max_agents_claimed"]


def test_parallelism_that_does_not_fill_the_worker_names_the_roles_tp():
    doc = example("attached")
    doc["topology"]["roles"][0]["tp"] = 8
    fields = errors_of(doc)
    assert list(fields) == ["topology.roles.0.tp"]
    assert (
        "tp 8 x pp 1 = 8 does not match accelerators_per_worker 4"
        in fields["topology.roles.0.tp"][0]
    )


def test_dp_ranks_sharing_a_worker_must_divide_tp():
    doc = example("attached")
    doc["topology"]["roles"][0].update({"tp": 4, "dp": 3})
    assert list(errors_of(doc)) == ["topology.roles.0.tp"]


def test_dp_ranks_with_their_own_accelerators_are_accepted():
    doc = example("attached")
    doc["topology"]["roles"][0].update({"accelerators_per_worker": 8, "tp": 4, "dp": 2})
    doc["topology"].update({"accelerators_used": 80, "accelerators_in_system": 144})
    assert parse_config(as_json(doc), "application/json").accelerators_used == 80


def test_accelerators_used_is_derived_from_the_roles():
    doc = example("attached")
    del doc["topology"]["accelerators_used"]
    config = parse_config(as_json(doc), "application/json")
    assert config.topology.accelerators_used == 4 * 4 + 1 * 48


def test_a_stated_accelerator_count_that_disagrees_with_the_roles_is_rejected():
    doc = example("attached")
    doc["topology"]["accelerators_used"] = 8
    fields = errors_of(doc)
    assert fields == {
        "topology.accelerators_used": [
            "stated 8, but the roles use 64 (sum of workers x accelerators_per_worker)"
        ]
    }


def test_a_system_smaller_than_the_accelerators_used_is_rejected():
    doc = example("attached")
    doc["topology"]["accelerators_in_system"] = 32
    assert list(errors_of(doc)) == ["topology.accelerators_in_system"]


def test_roles_on_different_hardware_are_rejected_at_the_second_role():
    doc = example("attached")
    doc["topology"]["roles"][1]["hardware"] = "gb200-nvl72"
    assert list(errors_of(doc)) == ["topology.roles.1.hardware"]


def test_aggregated_mode_takes_exactly_one_both_role():
    doc = example("simulated")
    doc["topology"]["roles"][0]["name"] = "decode"
    assert list(errors_of(doc)) == ["topology.roles"]


def test_disaggregated_mode_needs_a_kv_transfer():
    doc = example("attached")
    doc["kv_cache"]["transfer"] = "none"
    assert list(errors_of(doc)) == ["kv_cache.transfer"]


def test_an_image_without_a_digest_is_rejected():
    doc = example("attached")
    doc["engine"]["image"] = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.9.0"
    assert list(errors_of(doc)) == ["engine.image"]


def test_an_image_is_required_for_a_containerised_engine_on_real_hardware():
    doc = example("attached")
    del doc["engine"]["image"]
    fields = errors_of(doc)
    assert list(fields) == ["engine.image"]
    assert "pinned by digest" in fields["engine.image"][0]


def test_a_patch_needs_a_reason():
    doc = example("attached")
    doc["engine"]["patches"][0]["reason"] = ""
    assert list(errors_of(doc)) == ["engine.patches.0.reason"]


def test_a_clear_secret_in_the_environment_is_rejected_without_echoing_it():
    doc = example("attached")
    doc["env"]["HF_TOKEN"] = "hf_abcdefghijklmnopqrstuvwxyz0123"
    with pytest.raises(ConfigError) as info:
        parse_config(as_json(doc), "application/json")
    assert list(info.value.fields) == ["env.HF_TOKEN"]
    assert "{secret: NAME}" in info.value.fields["env.HF_TOKEN"][0]
    assert "hf_abcdef" not in str(info.value)


def test_a_credential_shaped_value_under_an_innocent_name_is_rejected():
    doc = example("process")
    doc["env"]["UPSTREAM"] = "sk-live-0123456789abcdef"
    assert list(errors_of(doc)) == ["env.UPSTREAM"]


def test_token_counts_in_variable_names_are_not_mistaken_for_secrets():
    doc = example("attached")
    doc["env"]["VLLM_MAX_NUM_BATCHED_TOKENS"] = "8192"
    config = parse_config(as_json(doc), "application/json")
    assert config.env["VLLM_MAX_NUM_BATCHED_TOKENS"] == "8192"


def test_a_secret_reference_is_stored_as_its_name_only():
    config = parse_config((EXAMPLES / "attached.yaml").read_text(), "application/yaml")
    assert config.model_dump(mode="json")["env"]["HF_TOKEN"] == {"secret": True}


def test_a_launcher_must_be_exactly_one_kind():
    doc = example("attached")
    doc["launcher"]["simulated"] = {"profile": "tiny"}
    assert list(errors_of(doc)) == ["launcher"]
    doc["launcher"] = {}
    assert list(errors_of(doc)) == ["launcher"]


def test_an_attached_launcher_takes_an_endpoint_id_not_a_url():
    doc = example("attached")
    doc["launcher"]["attached"]["endpoint_id"] = "http://10.0.0.1:8000/v1"
    assert list(errors_of(doc)) == ["launcher.attached.endpoint_id"]
    doc["launcher"]["attached"] = {"url": "http://10.0.0.1:8000", "served_model_name": "x"}
    assert set(errors_of(doc)) == {"launcher.attached.url", "launcher.attached.endpoint_id"}


def test_an_unknown_simulator_profile_is_rejected_listing_the_known_ones():
    doc = example("simulated")
    doc["launcher"]["simulated"]["profile"] = "no-such-profile"
    fields = errors_of(doc)
    assert list(fields) == ["launcher.simulated.profile"]
    assert "h100-sxm-hgx8-dsv41-flash" in fields["launcher.simulated.profile"][0]


def test_preview_availability_needs_a_date():
    doc = example("simulated")
    doc["availability"] = {"status": "preview"}
    assert list(errors_of(doc)) == ["availability.date"]


def test_several_errors_are_reported_together():
    doc = example("attached")
    doc["model"]["weight_precision"] = "fp3"
    doc["engine"]["name"] = "ollama"
    fields = errors_of(doc)
    assert {"model.weight_precision", "engine.name"} <= set(fields)


@override_settings(MAX_CONFIG_BYTES=2000)
def test_a_config_over_the_size_limit_is_refused_before_parsing():
    doc = example("simulated")
    doc["notes"] = "x" * 3000
    with pytest.raises(ConfigError) as info:
        parse_config(as_json(doc), "application/json")
    assert info.value.code == "too_large"


def test_yaml_aliases_are_refused():
    text = "a: &x [1, 2]\nb: *x\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, "application/yaml")
    assert info.value.code == "unparseable"
    assert "aliases" in info.value.fields["non_field_errors"][0]


def test_yaml_python_tags_are_refused():
    with pytest.raises(ConfigError) as info:
        parse_config("model: !!python/object/apply:os.system ['true']\n", "application/yaml")
    assert info.value.code == "unparseable"


@pytest.mark.parametrize("content_type", ["application/json", "application/yaml"])
def test_duplicate_keys_are_refused(content_type):
    text = '{"notes": "a", "notes": "b"}' if "json" in content_type else "notes: a\nnotes: b\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, content_type)
    assert "duplicate key 'notes'" in info.value.fields["non_field_errors"][0]


def test_a_non_mapping_document_is_refused():
    with pytest.raises(ConfigError) as info:
        parse_config("[1, 2, 3]", "application/json")
    assert info.value.fields == {"non_field_errors": ["got list"]}


def test_an_unsupported_content_type_is_refused():
    with pytest.raises(ConfigError) as info:
        parse_config("<config/>", "application/xml")
    assert info.value.code == "unsupported_media_type"


def test_a_validated_config_round_trips_through_its_json_dump():
    config = parse_config((EXAMPLES / "attached.yaml").read_text(), "application/yaml")
    dumped = config.model_dump(mode="json")
    again = DeploymentConfig.model_validate(copy.deepcopy(dumped))
    assert again.model_dump(mode="json") == dumped


def test_every_shipped_example_is_validated_here_and_each_launcher_has_one():
    # ladder-*.yaml are ladders (tests/engine/test_ladder.py, tests/ladders/test_gb300_platform.py)
    configs = [p for p in Path(EXAMPLES).glob("*.yaml") if not p.stem.startswith("ladder-")]
    assert sorted(p.stem for p in configs) == EXAMPLE_NAMES
    kinds = {
        parse_config((Path(EXAMPLES) / f"{n}.yaml").read_text(), "application/yaml").launcher.kind
        for n in EXAMPLE_NAMES
    }
    assert kinds == {"attached", "container", "process", "simulated"}


def test_a_simulator_profile_for_other_hardware_is_rejected():
    doc = example("simulated")
    doc["launcher"]["simulated"]["profile"] = "h200-hgx8-dsv41-flash"
    fields = errors_of(doc)
    assert list(fields) == ["launcher.simulated.profile"]
    assert "'h200-hgx8'" in fields["launcher.simulated.profile"][0]


def test_a_simulator_profile_for_another_model_is_rejected():
    doc = example("simulated")
    doc["model"]["id"] = "deepseek-v3"
    assert list(errors_of(doc)) == ["launcher.simulated.profile"]


def test_a_config_that_fakes_speculative_acceptance_is_refused_at_its_path():
    doc = example("process")
    doc["env"] = {"SGLANG_SIMULATE_ACC_LEN": "3"}
    with pytest.raises(ConfigError) as info:
        parse_config(as_json(doc), "application/json")
    assert list(info.value.fields) == ["env.SGLANG_SIMULATE_ACC_LEN"]
