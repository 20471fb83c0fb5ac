"""What each profile number rests on (agentperf/simulator/provenance.py): sourced, derived,
fitted, open (a band covers it) or an assumption no band covers; `show` prints the counts
and the unbanded assumptions by name. The bundled profiles still carry unbanded assumptions
(issue 34 item 4 is open): the ceilings below let none be added, and the CPU twin, whose
every number is measured, derived or fitted, must stay at none."""

from __future__ import annotations

import json

from agentperf.simulator.__main__ import main
from agentperf.simulator.profile import available_profiles, load_profile
from agentperf.simulator.provenance import (
    ASSUMPTION,
    DERIVED,
    FITTED,
    KINDS,
    OPEN,
    SOURCED,
    counts,
    kinds,
    source_kind,
    unbanded_assumptions,
)

# unbanded assumptions per bundled profile on 2026-12-07: lower them, never raise them
CEILINGS = {
    "b200-hgx8-dsv41-flash": 18,
    "gb200-nvl72-dsv41-flash": 30,
    "gb300-nvl72-dsv41-flash": 31,
    "gb300-nvl72-dsv41-flash-oct08": 42,
    "h100-sxm-hgx8-dsv41-flash": 18,
    "h200-hgx8-dsv41-flash": 18,
    "local-cpu-llamacpp": 0,
    "local-cpu-vllm": 0,
    "mi355x-8gpu-dsv41-flash": 18,
    "tiny": 22,  # the test suite's toy profile
    "vr-nvl72-dsv41-flash": 34,
}


def test_each_kind_of_source_is_told_apart():
    covered = ["deployment.prefill.replicas", "deployment.attention.flops_per_token"]
    assert source_kind("deployment.x", "https://example.org/paper", covered) == SOURCED
    assert source_kind("deployment.x", "derived: 8 x 900 GB/s", covered) == DERIVED
    assert source_kind("deployment.x", "physics: Poisson maximum", covered) == DERIVED
    assert source_kind("deployment.x", "fitted by calibrate --fit (start 0.6)", covered) == FITTED
    assert source_kind("deployment.x", "assumption: 70% of peak", covered) == ASSUMPTION
    assert source_kind("deployment.x", "change from 28 Oct: untuned", covered) == ASSUMPTION
    assert source_kind("deployment.x", "derived (assumption for V4.1): 4096", covered) == (
        ASSUMPTION
    )
    # an assumption a band moves is open, whether the band names the leaf or a section
    assert source_kind("deployment.prefill", "change from 28 Oct: split", covered) == OPEN
    assert source_kind("deployment.attention.flops_per_token", "assumption: x", covered) == OPEN
    assert source_kind("deployment.y", "open (band, see open.parameters)", covered) == OPEN


def test_every_bundled_profile_adds_no_unbanded_assumption():
    assert set(CEILINGS) == set(available_profiles())
    for name in available_profiles():
        profile = load_profile(name)
        found = counts(profile)
        assert list(found) == list(KINDS)
        assert sum(found.values()) == len(profile.provenance)
        unbanded = unbanded_assumptions(profile)
        assert len(unbanded) == found[ASSUMPTION]
        assert len(unbanded) <= CEILINGS[name], (name, unbanded)


def test_the_8_oct_bands_cover_the_split_it_assumes():
    k = kinds(load_profile("gb300-nvl72-dsv41-flash-oct08"))
    # the split's choices move the prefill replicas and the decode group's size
    for leaf in ("replicas",):
        assert k[f"deployment.prefill.{leaf}"] == OPEN
    for leaf in ("accelerators", "ep", "max_batch"):
        assert k[f"deployment.decode.{leaf}"] == OPEN
    assert k["deployment.prefill.request_chunk_tokens"] == OPEN
    assert k["deployment.efficiency.compute"] == ASSUMPTION  # "change from 28 Oct", no band


def test_show_prints_the_counts_and_names_the_unbanded_assumptions(capsys):
    assert main(["show", "--profile", "gb300-nvl72-dsv41-flash"]) == 0
    shown = json.loads(capsys.readouterr().out)
    profile = load_profile("gb300-nvl72-dsv41-flash")
    assert shown["provenance_counts"] == counts(profile)
    # the converged fit frees two; the three efficiencies it could not pin are sourced
    assert shown["provenance_counts"][FITTED] == 2
    k = kinds(profile)
    for path in (
        "deployment.efficiency.compute",
        "deployment.grouped_gemm.efficiency",
        "deployment.moe_comm.efficiency",
    ):
        assert k[path] == SOURCED, path
    assert shown["unbanded_assumptions"] == unbanded_assumptions(profile)
    assert "deployment.efficiency.compute" not in shown["unbanded_assumptions"]  # sourced
