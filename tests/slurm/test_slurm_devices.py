"""Which devices a Slurm task's container is given (runner/launchers/slurm_devices.py,
DB-free): a gres.conf read in Slurm's index order, the step's indices mapped to exactly
those nodes or to the pool's CDI names, and a refusal where Slurm's allocation and the
node's devices disagree. The real allocation through slurmd and Podman:
tests/slurm/test_slurm_launcher.py."""

from __future__ import annotations

import pytest

from runner.launchers.base import LauncherError
from runner.launchers.container import ContainerSpec, podman_run_argv
from runner.launchers.slurm_devices import gres_gpu_files, task_grant

GRES = """\
AutoDetect=off
# the fast nodes: eight GPUs, two lines, in Slurm's order
NodeName=gpu[01-02] Name=gpu Type=h100 File=/dev/nvidia[0-3]
NodeName=gpu[01-02] Name=gpu Type=h100 File=/dev/nvidia[4-7]
NodeName=gpu03 Name=gpu File=/dev/nvidia0,/dev/nvidia1
NodeName=gpu[01-03] Name=mps Count=100
"""


def test_a_gres_conf_lists_each_nodes_gpus_in_slurms_index_order():
    assert gres_gpu_files(GRES, "gpu02") == [f"/dev/nvidia{i}" for i in range(8)]
    assert gres_gpu_files(GRES, "gpu03") == ["/dev/nvidia0", "/dev/nvidia1"]
    assert gres_gpu_files(GRES, "cpu01") == []  # not named: no GPU lines for it
    assert gres_gpu_files("Name=gpu File=/dev/nvidia[0-1]\n", "any") == [
        "/dev/nvidia0",
        "/dev/nvidia1",
    ]


def _env(tmp_path, step: str) -> dict[str, str]:
    (tmp_path / "gres.conf").write_text(GRES)
    return {"SLURM_CONF": str(tmp_path / "slurm.conf"), "SLURM_STEP_GPUS": step}


def test_the_steps_indices_become_exactly_those_nodes(tmp_path):
    grant = task_grant(_env(tmp_path, "5,2"), "gpu01", wanted=2, shared="", memlock="1m")
    assert [acc.entry for acc in grant.accelerators] == ["/dev/nvidia5", "/dev/nvidia2"]
    assert grant.podman_devices() == ["/dev/nvidia5:/dev/nvidia5", "/dev/nvidia2:/dev/nvidia2"]
    assert grant.visible_env() == {"NVIDIA_VISIBLE_DEVICES": "5,2"}
    argv = podman_run_argv(
        ContainerSpec(
            image="r/e@sha256:" + "a" * 64,
            command=["serve"],
            name="n",
            devices=grant.podman_devices(),
            platform_env=grant.visible_env(),
        )
    )
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--device"] == [
        "/dev/nvidia5:/dev/nvidia5",
        "/dev/nvidia2:/dev/nvidia2",
    ]
    assert "NVIDIA_VISIBLE_DEVICES=5,2" in argv


def test_a_cpu_task_gets_no_device_and_hides_every_gpu_from_a_hook(tmp_path):
    grant = task_grant(_env(tmp_path, "0"), "gpu01", wanted=0, shared="")
    assert grant.podman_devices() == [] and grant.visible_env() == {
        "NVIDIA_VISIBLE_DEVICES": "void"
    }


def test_the_pools_cdi_names_stand_for_slurms_indices(tmp_path):
    declared = ",".join(f"nvidia.com/gpu={i}" for i in range(4))
    env = {"SLURM_STEP_GPUS": "3", "RUNNER_CDI_SPEC_DIRS": str(tmp_path)}
    grant = task_grant(env, "n1", wanted=1, declared=declared, shared="")
    assert grant.podman_devices() == ["nvidia.com/gpu=3"]
    assert grant.visible_env() == {"NVIDIA_VISIBLE_DEVICES": "3"}


@pytest.mark.parametrize(
    ("node", "step", "wanted", "message"),
    [
        ("gpu01", "", 1, "asked for 1 GPU(s) (--gpus-per-task) and Slurm allocated 0"),
        ("gpu01", "0", 2, "asked for 2 GPU(s) (--gpus-per-task) and Slurm allocated 1"),
        ("gpu03", "2", 1, "Slurm allocated GPU 2 on gpu03, and"),
        ("gpu01", "0,x", 2, "'x' is not a GPU index"),
    ],
)
def test_an_allocation_the_node_cannot_match_is_refused(tmp_path, node, step, wanted, message):
    with pytest.raises(LauncherError, match=message.replace("(", r"\(").replace(")", r"\)")):
        task_grant(_env(tmp_path, step), node, wanted=wanted, shared="")


def test_an_unreadable_gres_conf_is_named(tmp_path):
    env = {"SLURM_CONF": str(tmp_path / "none" / "slurm.conf"), "SLURM_STEP_GPUS": "0"}
    with pytest.raises(LauncherError, match="gres.conf is unreadable on node n1"):
        task_grant(env, "n1", wanted=1, shared="")
