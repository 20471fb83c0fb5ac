"""The GB300 8 Oct → 28 Oct ladder on the platform (docs/examples/ladder-gb300-platform.yaml,
issue #14 item 6): the six changes as simulator-profile overrides of the 8 Oct stack. The
portal's YAML body is accepted by the service, every rung is a simulated submission whose
override is the twin's delta, and the last rung is the calibrated 28 Oct profile."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from agentperf.simulator.profile import load_profile, load_profile_with
from catalog.services import catalog_seed
from demo.synthetic import make_hardware, make_org
from ladders.models import Ladder
from ladders.services import LadderError, ladder_create
from tests.submissions.support import make_catalog

pytestmark = pytest.mark.django_db

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "ladder-gb300-platform.yaml"
ENGINE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "ladder-gb300.yaml"
# differ by nature (identity) or only matter in disaggregated mode (KV transfer)
IGNORED = {"name", "label", "path", "provenance", "kv_transfer_latency_us", "kv_transfer_gb_s"}
# each profile declares its own open parameters (docs/simulator.md "Bands"); overrides
# patch the deployment only, so the 8 Oct profile's stay with the last rung
IGNORED |= {"open_parameters", "open_treatment"}


def _comparable(profile):
    return {
        f.name: getattr(profile, f.name)
        for f in dataclasses.fields(profile)
        if f.name not in IGNORED
    }


def test_the_platform_gb300_ladder_is_the_engine_ladder_as_profile_overrides() -> None:
    catalog_seed()
    body = yaml.safe_load(EXAMPLE.read_text())
    engine = yaml.safe_load(ENGINE.read_text())
    assert [r["name"] for r in body["rungs"]] == [s["name"] for s in engine["steps"]]
    ladder = ladder_create(org=make_org(), body=body)
    forward = list(ladder.rungs.filter(order="forward").order_by("index"))
    assert len(forward) == 7 and ladder.is_simulated
    assert all(r.submission.is_simulated for r in forward)
    # each rung's profile: the 8 Oct profile with the overrides its config carries
    profiles = []
    for rung in forward:
        simulated = rung.config["launcher"]["simulated"]
        assert simulated["profile"] == "gb300-nvl72-dsv41-flash-oct08"
        profiles.append(load_profile_with(simulated["profile"], simulated.get("overrides")))
    assert profiles[0] == load_profile("gb300-nvl72-dsv41-flash-oct08")
    assert _comparable(profiles[-1]) == _comparable(load_profile("gb300-nvl72-dsv41-flash"))
    # the config's claims follow the twin: 4 draft tokens, one co-located instance
    assert forward[-1].config["speculative"]["draft_tokens"] == 4
    assert forward[-1].config["topology"]["mode"] == "aggregated"
    # leave-one-out: all changes (the forward order's last rung, shared) and all but each
    loo = list(ladder.rungs.filter(order="leave_one_out").order_by("index"))
    assert [r.name for r in loo[1:]] == ["all changes"] + [
        f"all but {s['name']}" for s in engine["steps"]
    ]
    assert loo[1].submission_id == forward[-1].submission_id
    assert Ladder.objects.count() == 1


def test_a_rung_may_change_the_topology_but_not_the_hardware_system() -> None:
    cat = make_catalog()
    other = make_hardware()
    config = cat.config()
    roles = [dict(role, hardware=other.slug) for role in config["topology"]["roles"]]
    body = {
        "name": "move",
        "baseline": {"config": config},
        "rungs": [
            {"name": "same", "description": "a note", "patch": {"notes": "n"}},
            {"name": "elsewhere", "description": "d", "patch": {"topology": {"roles": roles}}},
        ],
    }
    with pytest.raises(LadderError) as caught:
        ladder_create(org=make_org(), body=body)
    assert "rungs.1.patch.topology.roles" in (caught.value.fields or {}), caught.value.fields
    assert not Ladder.objects.exists()
