"""The demo's data (demo/steps.py, issue #28): its runs show both loops and cost. The H100 dry
run it submits is simulated.yaml with the open loop asked for; the hardware of its simulated
runs has sourced catalog prices (real cost figures), and llama.cpp's local CPU has none (its
cost shows "—")."""

from __future__ import annotations

import yaml

from agentperf.catalog_data import load_catalog
from demo.steps import EXAMPLES, LABELS, RUNNABLE
from submissions.schema import parse_config


def _configs() -> dict[str, dict]:
    return {name: yaml.safe_load((EXAMPLES / name).read_text()) for name in RUNNABLE}


def test_every_demo_config_is_valid_and_labelled() -> None:
    for name in RUNNABLE:
        parse_config((EXAMPLES / name).read_text(), "application/yaml")
        assert LABELS[name]


def test_the_demo_h100_run_asks_for_both_loops_and_is_simulated_yaml_otherwise() -> None:
    configs = _configs()
    open_loop = [n for n, c in configs.items() if c["benchmark"].get("arrival") == "open"]
    assert open_loop == ["simulated-open-loop.yaml"]
    doc = configs["simulated-open-loop.yaml"]
    assert "simulated" in doc["launcher"]
    plain = yaml.safe_load((EXAMPLES / "simulated.yaml").read_text())
    assert "arrival" not in plain["benchmark"]
    doc["benchmark"].pop("arrival")
    doc.pop("notes"), plain.pop("notes")
    assert doc == plain  # the same deployment and search, plus the open loop


def test_the_demo_hardware_has_sourced_prices_except_the_local_cpu() -> None:
    prices = load_catalog().prices
    by_system: dict[str, list[dict]] = {}
    for entry in prices.values():
        by_system.setdefault(entry["system"], []).append(entry)
    for name, doc in _configs().items():
        systems = {role["hardware"] for role in doc["topology"]["roles"]}
        if "simulated" in doc["launcher"]:
            for system in systems:
                figures = [
                    value
                    for entry in by_system.get(system, [])
                    for key, value in entry.items()
                    if isinstance(value, dict) and value.get("value") is not None
                ]
                assert figures, (name, system)
                assert all(f["source"] for f in figures)
        else:
            assert systems == {"local-cpu"} and "local-cpu" not in by_system
    # the H100 rents by the hour: its cost table has figures without any measured power
    h100 = {e["class"]: e for e in by_system["h100-sxm-hgx8"]}
    assert h100["on-demand"]["usd_per_accelerator_hour"]["value"] > 0


def test_with_podman_the_demo_runs_llama_cpp_in_its_image_pinned_by_digest(monkeypatch) -> None:
    from demo.steps import example_text

    image = "127.0.0.1:15055/agentperf/llamacpp@sha256:" + "e" * 64
    monkeypatch.delenv("AGENTPERF_DEMO_IMAGE", raising=False)
    assert parse_config(example_text("process.yaml"), "application/yaml").launcher.kind == (
        "process"
    )
    monkeypatch.setenv("AGENTPERF_DEMO_IMAGE", image)
    config = parse_config(example_text("process.yaml"), "application/yaml")
    assert config.launcher.kind == "container" and config.engine.image == image
    assert example_text("simulated.yaml") == (EXAMPLES / "simulated.yaml").read_text()
