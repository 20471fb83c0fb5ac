"""The inventory of what served and its check against the config (agentperf/inventory.py,
docs/verification.md "inventory"): the contract refuses a malformed inventory naming the
field, and the check fails each mismatch with the evidence shown."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError
from rest_framework.test import APIClient

from agentperf import contract
from agentperf.inventory import Inventory, check_inventory
from tests.pipeline.conftest import catalog  # noqa: F401  (the seeded catalog fixture)

CONFIG = {
    "engine": {"name": "vllm", "version": "0.14.0"},
    "clocks": {"gpu_clock_mhz": 1950, "power_cap_w": 1000},
}


def _accelerator(index: int, **over) -> dict:
    acc = {
        "index": index,
        "name": "NVIDIA GB300",
        "uuid": f"GPU-{index:04d}",
        "serial": f"S{index}",
        "vbios": "97.00.1",
        "power_limit_w": 1000.0,
        "ecc_enabled": True,
        "clocks": {"sm_locked_min_mhz": 1950, "sm_locked_max_mhz": 1950, "sm_current_mhz": 1950},
    }
    acc.update(over)
    return acc


def _inventory(n: int = 4, **over) -> dict:
    inv = {
        "tool": "nvml",
        "driver_version": "580.65",
        "cuda_version": "13.0",
        "accelerators": [_accelerator(i) for i in range(n)],
        "runtime": {"launcher": "process", "image_reference": None, "user": "nobody"},
        "server": {"engine_name": "vllm", "engine_version": "v0.14.0+cu130", "source": "/version"},
        "machine": {"cpu_model": "Grace", "cpu_count": 72, "kernel": "6.8.0"},
    }
    inv.update(over)
    return Inventory.model_validate(inv).model_dump(mode="json")


def check(inv, config=CONFIG, used=4, accelerator="GB300"):
    return check_inventory(inv, config, accelerator=accelerator, accelerators_used=used)


def test_an_inventory_that_matches_the_config_passes_with_its_uuids():
    got = check(_inventory())
    assert got["status"] == "pass", got["summary"]
    assert got["evidence"]["uuids"] == ["GPU-0000", "GPU-0001", "GPU-0002", "GPU-0003"]
    assert got["evidence"]["compared"]["engine"]["server"]["version"] == "v0.14.0+cu130"


def test_no_inventory_is_a_warning_never_a_pass():
    got = check(None)
    assert got["status"] == "warn" and "no inventory" in got["summary"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            lambda inv: inv["accelerators"].pop(),
            "the config uses 4 accelerators; the inventory lists 3",
        ),
        (
            lambda inv: inv["accelerators"][0].update(name="NVIDIA H100 80GB HBM3"),
            "the hardware system has GB300",
        ),
        (
            lambda inv: inv["accelerators"][2].update(power_limit_w=1400.0),
            "power cap declared 1000 W",
        ),
        (
            lambda inv: inv["accelerators"][1]["clocks"].update(
                sm_locked_min_mhz=1000, sm_locked_max_mhz=2100, sm_application_mhz=2100
            ),
            "sm clock locked at 1950 MHz declared",
        ),
        (
            lambda inv: inv["server"].update(engine_version="0.13.2"),
            "engine version '0.14.0' declared; the server reports '0.13.2'",
        ),
        (lambda inv: inv["server"].update(engine_name="sglang"), "engine 'vllm' declared"),
    ],
)
def test_each_mismatch_fails_with_the_evidence(change, words):
    inv = copy.deepcopy(_inventory())
    change(inv)
    got = check(inv)
    assert got["status"] == "fail" and words in got["summary"], got["summary"]
    assert any(words in m for m in got["evidence"]["mismatches"])


def test_what_the_host_did_not_report_is_a_warning_naming_it():
    inv = _inventory(server=None)
    for acc in inv["accelerators"]:
        acc["power_limit_w"] = None
    got = check(inv)
    assert got["status"] == "warn"
    assert got["evidence"]["not_reported"] == [
        "power limit not reported",
        "the server reported no engine name or version",
    ]


def test_the_contract_carries_the_inventory_and_refuses_a_malformed_one():
    good = contract.HostInventory.model_validate(
        {"measured": True, "tool": "nvml", "accelerators": [], "inventory": _inventory()}
    )
    assert good.dump()["inventory"]["accelerators"][0]["uuid"] == "GPU-0000"
    bad = _inventory()
    bad["accelerators"][0]["power_limit_w"] = "1000"  # strict: no coercion
    with pytest.raises(ValidationError) as refused:
        contract.HostInventory.model_validate(
            {"measured": True, "accelerators": [], "inventory": bad}
        )
    assert ("inventory", "accelerators", 0, "power_limit_w") in [
        e["loc"] for e in refused.value.errors()
    ]
    extra = dict(_inventory(), firmware_blob="x")
    with pytest.raises(ValidationError, match="firmware_blob"):
        Inventory.model_validate(extra)


@pytest.mark.django_db
@pytest.mark.usefixtures("catalog")
def test_the_runner_api_stores_the_inventory_and_the_report_checks_it(cast):
    from runs.models import BenchmarkRun
    from runs.verification_report import verification_build
    from tests.pipeline.builders import completion, prepared_run, runner_info, trial_payload

    run, token = prepared_run(cast.org_a)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    started = client.post(
        f"/api/v1/runner/runs/{run.pk}/start", {"runner_info": runner_info()}, format="json"
    )
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_X_RUN_ATTEMPT=str(started.json()["attempt"])
    )
    client.post(f"/api/v1/runner/runs/{run.pk}/trials", trial_payload(run, 0, 1), format="json")
    payload = completion(run)
    bad = _inventory(1)
    bad["accelerators"][0]["index"] = -1
    payload["telemetry"]["inventory"] = bad
    refused = client.post(f"/api/v1/runner/runs/{run.pk}/complete", payload, format="json")
    assert refused.status_code == 400
    assert "telemetry.inventory.accelerators.0.index" in str(refused.json())

    inventory = _inventory(1, server={"engine_name": "vllm", "engine_version": "0.9.0"})
    payload["telemetry"]["inventory"] = inventory
    done = client.post(f"/api/v1/runner/runs/{run.pk}/complete", payload, format="json")
    assert done.status_code == 200, done.json()
    run = BenchmarkRun.objects.get(pk=run.pk)
    assert run.telemetry["inventory"]["accelerators"][0]["uuid"] == "GPU-0000"
    # A simulated run's report has no inventory check (its host is not the system)...
    assert "inventory" not in {c["name"] for c in run.verification.checks}
    # ...a measured one compares the inventory with its config, and shows the evidence.
    run.run_spec = dict(run.run_spec, simulated=False)
    run.save(update_fields=["run_spec"])
    report = verification_build(run=run)
    got = next(c for c in report.checks if c["name"] == "inventory")
    engine = run.submission.config["engine"]
    assert (engine["name"], engine["version"]) == ("sglang", "0.5.4")
    assert got["status"] == "fail", got
    assert "engine 'sglang' declared; the server says 'vllm'" in got["summary"]
    assert "engine version '0.5.4' declared; the server reports '0.9.0'" in got["summary"]
    assert got["evidence"]["uuids"] == ["GPU-0000"]
