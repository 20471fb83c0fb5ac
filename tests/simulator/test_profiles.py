"""Profile loading: catalog figures with sources, refusal of unsourced or missing numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agentperf.catalog_data import load_catalog
from agentperf.simulator.profile import ProfileError, available_profiles, load_profile

CATALOG_SYSTEMS = {"gb300-nvl72", "gb200-nvl72", "b200-hgx8", "h200-hgx8", "h100-sxm-hgx8"}


def _fixture_catalog(tmp: Path, *, fp8: float | None) -> Path:
    fig = lambda v: {"value": v, "source": "https://example.test/sheet", "note": ""}  # noqa: E731
    (tmp / "hardware.yaml").write_text(
        yaml.safe_dump(
            {
                "systems": [
                    {
                        "slug": "box",
                        "accelerators_per_system": fig(8),
                        "memory_gb_per_accelerator": fig(80),
                        "hbm_bandwidth_tb_s": fig(3.35),
                        "peak_tflops_dense": {"fp8": fig(fp8), "bf16": fig(989)},
                    }
                ]
            }
        )
    )
    (tmp / "tiers.yaml").write_text("tier_sets: []\n")
    (tmp / "models.yaml").write_text(
        yaml.safe_dump(
            {
                "models": [
                    {
                        "slug": "m",
                        "total_params_b": fig(70),
                        "active_params_prefill_b": fig(70),
                        "active_params_decode_b": fig(70),
                        "context_length": fig(131072),
                        "kv_bytes_per_token": fig(327680),
                        "weight_bits": fig(8),
                    }
                ]
            }
        )
    )
    return tmp


def _profile_doc(**deployment_changes: object) -> dict:
    dep = {
        "precision": "fp8",
        "mode": "aggregated",
        "aggregated": {"replicas": 1, "accelerators": 8, "max_batch": 256},
        "efficiency": {"compute": 0.4, "bandwidth": 0.7, "iteration_overhead_us": 500},
    }
    dep.update(deployment_changes)
    return {
        "name": "fixture",
        "system": "box",
        "model": "m",
        "deployment": dep,
        "sources": {"deployment": "assumption: fixture"},
    }


def _write(tmp: Path, doc: dict) -> Path:
    p = tmp / "profile.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_every_bundled_profile_loads_against_the_repository_catalog():
    names = available_profiles()
    assert "tiny" in names and len(names) >= 7
    systems = {load_profile(n).system_slug for n in names}
    assert CATALOG_SYSTEMS | {"mi355x-8gpu"} <= systems
    gb300 = load_profile("gb300-nvl72-dsv41-flash")
    assert gb300.model_slug == "deepseek-v4.1-flash-max"
    assert gb300.accelerators_used == 72
    assert gb300.provenance["system.hbm_bandwidth_tb_s"].startswith("https://")
    assert all(v for v in gb300.provenance.values())


def test_a_profile_fills_figures_from_the_catalog(tmp_path: Path):
    cat = _fixture_catalog(tmp_path, fp8=1979)
    p = load_profile(_write(tmp_path, _profile_doc()), catalog_dir=cat)
    assert (p.peak_tflops, p.hbm_tb_s, p.kv_bytes_per_token) == (1979, 3.35, 327680)
    assert p.provenance["system.peak_tflops_dense.fp8"].startswith("https://example.test")


def test_a_null_catalog_figure_without_an_override_refuses_to_load(tmp_path: Path):
    cat = _fixture_catalog(tmp_path, fp8=None)
    with pytest.raises(ProfileError, match=r"catalog_overrides\.system\.peak_tflops_dense\.fp8"):
        load_profile(_write(tmp_path, _profile_doc()), catalog_dir=cat)


def test_a_sourced_override_supplies_a_null_catalog_figure(tmp_path: Path):
    cat = _fixture_catalog(tmp_path, fp8=None)
    doc = _profile_doc()
    doc["catalog_overrides"] = {
        "system": {"peak_tflops_dense": {"fp8": {"value": 2000, "source": "https://x.test"}}}
    }
    assert load_profile(_write(tmp_path, doc), catalog_dir=cat).peak_tflops == 2000


def test_an_override_without_a_source_is_refused(tmp_path: Path):
    cat = _fixture_catalog(tmp_path, fp8=None)
    doc = _profile_doc()
    doc["catalog_overrides"] = {"system": {"peak_tflops_dense": {"fp8": {"value": 2000}}}}
    with pytest.raises(ProfileError, match="source"):
        load_profile(_write(tmp_path, doc), catalog_dir=cat)


def test_a_deployment_number_without_a_source_or_assumption_is_refused(tmp_path: Path):
    cat = _fixture_catalog(tmp_path, fp8=1979)
    doc = _profile_doc()
    doc["sources"] = {"deployment.aggregated": "assumption: one replica"}
    with pytest.raises(ProfileError, match=r"deployment\.efficiency\.compute"):
        load_profile(_write(tmp_path, doc), catalog_dir=cat)


def test_weights_that_do_not_fit_in_memory_are_refused(tmp_path: Path):
    cat = _fixture_catalog(tmp_path, fp8=1979)
    doc = _profile_doc(
        aggregated={"replicas": 1, "accelerators": 1, "max_batch": 8}, weight_bits=16
    )
    with pytest.raises(ProfileError, match="do not fit"):
        load_profile(_write(tmp_path, doc), catalog_dir=cat)


def test_unknown_deployment_fields_are_refused(tmp_path: Path):
    cat = _fixture_catalog(tmp_path, fp8=1979)
    with pytest.raises(ProfileError, match="unknown field"):
        load_profile(_write(tmp_path, _profile_doc(turbo=True)), catalog_dir=cat)


@pytest.mark.parametrize("flag", ["false", "no", 0, 1])
def test_a_yes_no_field_takes_true_or_false_only(tmp_path: Path, flag: object):
    """``enabled: "false"`` was read as its truth value (true): now refused, by its path."""
    cat = _fixture_catalog(tmp_path, fp8=1979)
    doc = _profile_doc(prefix_caching={"enabled": flag})
    with pytest.raises(ProfileError, match=r"prefix_caching\.enabled: expected true or false"):
        load_profile(_write(tmp_path, doc), catalog_dir=cat)


@pytest.mark.parametrize("section", ["prefix_caching", "moe_comm", "power"])
def test_a_section_given_as_false_is_refused_not_read_as_absent(tmp_path: Path, section: str):
    cat = _fixture_catalog(tmp_path, fp8=1979)
    doc = _profile_doc(**{section: False})
    with pytest.raises(ProfileError, match=rf"{section}: expected a mapping, got bool"):
        load_profile(_write(tmp_path, doc), catalog_dir=cat)
    load_profile(_write(tmp_path, _profile_doc(**{section: None})), catalog_dir=cat)


def test_the_repository_catalog_has_the_systems_the_profiles_name():
    assert CATALOG_SYSTEMS <= set(load_catalog().systems)


def test_the_demo_gb300_dry_run_example_validates_and_names_the_calibrated_profile():
    from submissions.schema import parse_config

    text = (
        Path(__file__).parents[2] / "docs" / "examples" / "gb300-nvl72-dry-run.yaml"
    ).read_text()
    config = parse_config(text, "application/yaml")
    profile = load_profile(yaml.safe_load(text)["launcher"]["simulated"]["profile"])
    assert config.launcher.kind == "simulated"
    assert profile.name == "gb300-nvl72-dsv41-flash" and profile.mode == "aggregated"
    assert config.accelerators_used == profile.accelerators_used == 72


_FIELD = {"compute": "compute_efficiency", "iteration_overhead_us": "iteration_overhead_us"}


def test_the_predictive_profiles_differ_from_the_calibrated_one_by_named_changes():
    base = load_profile("gb300-nvl72-dsv41-flash")
    for name, expected in (
        (
            "gb300-nvl72-dsv41-flash-oct08",
            {
                "deployment.speculative.k",
                "deployment.efficiency.iteration_overhead_us",
                "deployment.attention.efficiency",
                "deployment.grouped_gemm.efficiency",
            },
        ),
        (
            "vr-nvl72-dsv41-flash",
            {"deployment.efficiency.iteration_overhead_us", "deployment.attention.efficiency"},
        ),
    ):
        p = load_profile(name)
        assert p.mode == "disaggregated"
        changed = {k for k, v in p.provenance.items() if v.startswith("change from")}
        assert expected <= changed, name
        for key in changed:  # a named change really changes the calibrated value
            leaf = key.split(".")[-1]
            if leaf in ("compute", "iteration_overhead_us") and base.provenance.get(key):
                assert getattr(p, _FIELD[leaf]) != getattr(base, _FIELD[leaf]), (name, key)
        assert all(p.provenance.values())  # every figure sourced, derived or an assumption
    vr = load_profile("vr-nvl72-dsv41-flash")
    assert (vr.accelerators_used, vr.spec_k, vr.precision) == (14, 6, "fp4")
    # the catalog keeps Rubin's FP4 peak and power unknown: the FP4 peak is an open parameter
    # (a band over 25-50 PFLOPS, docs/simulator.md "Bands"), the power an assumption
    assert vr.provenance["system.peak_tflops_dense.fp4"].startswith("open (band")
    assert [(o.path, o.low, o.high) for o in vr.open_parameters] == [
        ("catalog_overrides.system.peak_tflops_dense.fp4", 25000, 50000)
    ]
    assert vr.provenance["system.accelerator_power_w"].startswith("assumption:")
    assert vr.provenance["deployment.speculative.k"].startswith("issue 13: DSpark with 6")
    assert base.power_tdp_w == 1400 and base.provenance["system.accelerator_power_w"].startswith(
        "https://"
    )
