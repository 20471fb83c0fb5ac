"""What served a result, on its page and in the public API (leaderboard/inventory_view.py,
docs/verification.md "inventory"): the inventory the run recorded through the contract and
the check that compared it with the config, with a mismatch's evidence shown."""

from __future__ import annotations

import pytest

from agentperf import contract
from agentperf.inventory import Inventory, check_inventory
from demo.synthetic import make_published_result

INVENTORY = {
    "tool": "nvml",
    "driver_version": "570.124.06",
    "cuda_version": "12.8",
    "accelerators": [
        {
            "index": i,
            "name": "NVIDIA H200",
            "uuid": f"GPU-5eed{i:04d}",
            "serial": f"165012400{i}",
            "vbios": "96.00.A5.00.01",
            "power_limit_w": 600.0,
            "ecc_enabled": True,
            "clocks": {"sm_current_mhz": 1980, "sm_application_mhz": 1785},
        }
        for i in range(2)
    ],
    "runtime": {
        "launcher": "container",
        "image_reference": "registry.local/vllm@sha256:" + "cd" * 32,
        "image_digest": "sha256:" + "cd" * 32,
        "entrypoint": ["vllm", "serve"],
        "user": "65534:65534",
    },
    "server": {"engine_name": "vllm", "engine_version": "0.14.0", "source": "/version"},
    "machine": {"cpu_model": "Intel Xeon Platinum 8480+", "cpu_count": 224, "kernel": "Linux 6.8"},
}


def _published(inventory):
    """A published measured result whose run recorded `inventory` (None: none), with the
    inventory check of a config that declares the 600 W cap it holds (a failed check would
    refuse the publish: leaderboard/publishing.py)."""
    stored = None
    if inventory is not None:
        stored = Inventory.model_validate(inventory).model_dump(mode="json")
    config = {"engine": {"name": "vllm", "version": "0.14.0"}, "clocks": {"power_cap_w": 600}}
    checked = check_inventory(stored, config, accelerator="H200", accelerators_used=2)
    result = make_published_result(config=config, accelerators=2, verification=[checked])
    telemetry = {"measured": False, "reason": "not measured", "accelerators": []}
    if stored is not None:
        telemetry["inventory"] = stored
    result.run.telemetry = contract.HostInventory.model_validate(telemetry).dump()
    result.run.save(update_fields=["telemetry"])
    return result


@pytest.mark.django_db
def test_the_result_page_and_api_show_what_served_and_its_check(client):
    result = _published(INVENTORY)
    assert result.is_simulated is False
    body = client.get(f"/api/v1/public/results/{result.pk}/").json()
    inventory = body["inventory"]
    assert inventory["recorded"] is True
    assert [a["uuid"] for a in inventory["document"]["accelerators"]] == [
        "GPU-5eed0000",
        "GPU-5eed0001",
    ]
    assert inventory["document"]["runtime"]["image_digest"] == "sha256:" + "cd" * 32
    assert inventory["check"] == {
        "status": "pass",
        "summary": "2 × NVIDIA H200 as declared (nvml)",
        "mismatches": [],
    }
    html = client.get(f"/results/{result.pk}/").content.decode()
    section = html[html.index('id="inventory"') : html.index('id="receipt"')]
    for text in (
        "GPU-5eed0001",
        "1650124001",
        "96.00.A5.00.01",
        "600 W",
        "1980 / 1785 MHz",
        "driver 570.124.06, CUDA 12.8",
        "registry.local/vllm@sha256:" + "cd" * 32,
        "vllm 0.14.0",
        "Intel Xeon Platinum 8480+ × 224",
        "2 × NVIDIA H200 as declared (nvml)",
    ):
        assert text in section, text
    assert 'class="status-pass"' in section


@pytest.mark.django_db
def test_a_run_without_an_inventory_says_so(client):
    result = _published(None)
    body = client.get(f"/api/v1/public/results/{result.pk}/").json()
    assert body["inventory"]["recorded"] is False
    assert body["inventory"]["check"]["status"] == "warn"
    html = client.get(f"/results/{result.pk}/").content.decode()
    assert "The runner recorded no inventory of what served this run." in html
