"""Scale on paper, checked by Slurm (docs/pipeline.md "Slurm"): the jobs the launcher would
submit for the two published rack deployments (GB300 NVL72 28 Oct co-located over 72 GPUs;
Vera Rubin NVL72 3 × 2-GPU prefill + one 8-GPU decode), rendered from deploy/slurm/*.yaml
against a private cluster described by deploy/slurm/*-nvl72.conf (18 trays × 4 GPUs and a
frontend node: a slurmd per node on this host, stand-in GPU files) and accepted by
`sbatch --test-only`; a topology larger than the rack is refused before Slurm is asked.

`python -m tests.slurm.test_sbatch_test_only` prints the rendered jobs and Slurm's answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from runner.launchers.base import LauncherError
from runner.launchers.slurm_job import render_config
from tests.slurm.cluster import SlurmCluster, start_slurm

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "slurm"
RACKS = {
    "gb300-28oct-colocated.yaml": "gb300-nvl72",
    "vera-rubin-3x2-prefill-8-decode.yaml": "vera-rubin-nvl72",
}


def rack(name: str) -> SlurmCluster:
    return start_slurm(
        (DEPLOY / f"{name}.conf").read_text(), (DEPLOY / f"{name}.gres.conf").read_text()
    )


def render_and_test(cluster: SlurmCluster, config_file: str) -> tuple[str, str]:
    """(the rendered sbatch script, sbatch --test-only's answer)."""
    config = yaml.safe_load((DEPLOY / config_file).read_text())
    script = render_config(
        config,
        job_name="agentperf-run-1234",
        job_dir="/shared/agentperf/jobs/agentperf-run-1234",
        runtime="pyxis",
        frontend_constraint="frontend",
    )
    done = subprocess.run(
        ["sbatch", "--test-only"], input=script, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return script, (done.stdout + done.stderr).strip()


def wait_until_running(job_id: str, timeout_s: float = 30) -> list[str]:
    """The nodes of each component of heterogeneous job `job_id` once all run (squeue)."""
    deadline = time.monotonic() + timeout_s
    listed: list = []
    while time.monotonic() < deadline:
        listed = [
            j
            for j in json.loads(
                subprocess.run(
                    ["squeue", "--json"], capture_output=True, text=True, check=True
                ).stdout
            )["jobs"]
            if str(j.get("het_job_id")) == job_id
        ]
        if listed and all(j["job_state"] == "RUNNING" for j in listed):
            return [j["nodes"] for j in sorted(listed, key=lambda j: j["het_job_offset"])]
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} not running within {timeout_s:g} s: {listed}")


@pytest.fixture
def racks() -> Iterator:
    """Start a described rack (stopped at the end), SLURM_CONF pointing at it meanwhile."""
    previous = os.environ.get("SLURM_CONF")
    started: list[SlurmCluster] = []

    def start(name: str) -> SlurmCluster:
        started.append(rack(name))
        os.environ["SLURM_CONF"] = str(started[-1].conf)
        return started[-1]

    yield start
    for cluster in started:
        cluster.stop()
    if previous is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = previous


@pytest.mark.parametrize("config_file", sorted(RACKS))
def test_the_rendered_rack_jobs_pass_sbatch_test_only(racks, config_file, settings):
    from submissions.schema import parse_config

    parse_config((DEPLOY / config_file).read_text(), "application/yaml")  # a valid config
    script, answer = render_and_test(racks(RACKS[config_file]), config_file)
    assert "#SBATCH hetjob" in script and "#SBATCH --job-name=agentperf-run-1234" in script
    assert "--constraint=frontend" in script and "--container-image=" in script
    assert "to start at" in answer, answer
    # --test-only names the first components' nodes only: the same header submitted for real
    # (its body a sleep; a slurmd per described node) shows where each component lands
    header = "\n".join(line for line in script.splitlines() if line.startswith("#"))
    job_id = subprocess.run(
        ["sbatch", "--parsable", "--output=/dev/null"],
        input=header + "\nsleep 600\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    placed = wait_until_running(job_id)
    subprocess.run(["scancel", job_id], check=True)
    if config_file.startswith("gb300"):
        assert placed == ["fe01", "gb300-[01-18]"]
        # 18 trays for the one 72-GPU worker, plus the frontend node
        assert "--nodes=18 --ntasks=18 --ntasks-per-node=1 --gpus-per-task=4" in script
        assert "fe01,gb300-[01-18]" in answer
    else:
        assert "--nodes=2 --ntasks=3 --ntasks-per-node=2 --gpus-per-task=2  # prefill" in script
        assert "--nodes=2 --ntasks=2 --ntasks-per-node=1 --gpus-per-task=4  # decode" in script
        assert placed == ["fe01", "vr-[01-02]", "vr-[03-04]"]  # frontend, prefill, decode


def test_a_topology_larger_than_the_rack_is_refused_naming_the_field(racks):
    racks("gb300-nvl72")
    config = yaml.safe_load((DEPLOY / "gb300-28oct-colocated.yaml").read_text())
    config["topology"]["roles"][0]["workers"] = 2  # 144 GPUs on a 72-GPU rack
    with pytest.raises(LauncherError) as caught:
        render_config(config, job_name="x", job_dir="/tmp/x")
    assert str(caught.value).startswith("topology.roles.0.workers:"), caught.value


if __name__ == "__main__":  # the rendered jobs for docs/pipeline.md "Slurm"
    for config_file, name in RACKS.items():
        cluster = rack(name)
        os.environ["SLURM_CONF"] = str(cluster.conf)
        try:
            script, answer = render_and_test(cluster, config_file)
            print(f"### {config_file} on {name}\n{script}\n$ sbatch --test-only\n{answer}\n")
        finally:
            cluster.stop()
    sys.exit(0)
