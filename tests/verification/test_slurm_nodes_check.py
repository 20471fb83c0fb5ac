"""The Slurm run's check across its nodes (agentperf/inventory.py `check_slurm_nodes`,
docs/verification.md "inventory"): the accelerators given to the job's tasks add up to the
config's, and each serving node's own inventory lists the declared hardware. The node
inventories here are the runner's Inventory documents (validated by the model), as each
Slurm task records them (runner/launchers/slurm_task.py `machine_inventory`)."""

from __future__ import annotations

from agentperf.inventory import Inventory, check_slurm_nodes


def _node(name: str, gpus: int, accelerators: list[str], cpu: str | None = "Xeon") -> dict:
    doc = Inventory.model_validate(
        {
            "tool": "nvml" if accelerators else "none",
            "accelerators": [{"index": i, "name": n} for i, n in enumerate(accelerators)],
            "machine": {"cpu_model": cpu, "cpu_count": 4},
        }
    ).model_dump(mode="json")
    return {"node": name, "gpus": gpus, "roles": ["both"], "inventory": doc}


def _layout(*nodes: dict) -> dict:
    frontend = {"node": "fe01", "gpus": 0, "roles": ["frontend"], "inventory": None}
    return {"nodes": [frontend, *nodes]}


GB300 = "NVIDIA GB300"


def test_nodes_holding_the_declared_gpus_pass():
    layout = _layout(_node("t01", 4, [GB300] * 4), _node("t02", 4, [GB300] * 4))
    got = check_slurm_nodes(layout, accelerator="GB300", accelerators_used=8)
    assert got["status"] == "pass", got
    assert [n["node"] for n in got["evidence"]["nodes"]] == ["t01", "t02"]  # not the frontend


def test_a_node_with_other_hardware_fails_naming_the_node():
    layout = _layout(_node("t01", 4, [GB300] * 4), _node("t02", 4, ["NVIDIA H100 80GB HBM3"] * 4))
    got = check_slurm_nodes(layout, accelerator="GB300", accelerators_used=8)
    assert got["status"] == "fail" and "node t02" in got["summary"], got
    assert "H100" in got["summary"]


def test_accelerators_that_do_not_add_up_fail():
    layout = _layout(_node("t01", 4, [GB300] * 4))
    got = check_slurm_nodes(layout, accelerator="GB300", accelerators_used=8)
    assert got["status"] == "fail"
    assert "hold 4 accelerators; the config uses 8" in got["summary"]


def test_a_node_without_an_inventory_warns():
    missing = {"node": "t02", "gpus": 4, "roles": ["both"], "inventory": None}
    layout = _layout(_node("t01", 4, [GB300] * 4), missing)
    got = check_slurm_nodes(layout, accelerator="GB300", accelerators_used=8)
    assert got["status"] == "warn" and "t02" in got["summary"], got


def test_a_cpu_system_counts_each_nodes_cpu_and_refuses_a_gpu():
    ok = _layout(_node("node2", 2, []), _node("node3", 2, []))
    assert check_slurm_nodes(ok, accelerator="CPU", accelerators_used=4)["status"] == "pass"
    gpu = _layout(_node("node2", 2, []), _node("node3", 2, [GB300]))
    got = check_slurm_nodes(gpu, accelerator="CPU", accelerators_used=4)
    assert got["status"] == "fail" and "node node3" in got["summary"]


def test_no_layout_is_a_warning():
    assert check_slurm_nodes(None, accelerator="GB300", accelerators_used=8)["status"] == "warn"
