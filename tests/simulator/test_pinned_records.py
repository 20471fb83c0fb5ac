"""The simulator's output, pinned: a change to the model's code that is meant to keep its
behaviour (a refactor, a speed-up) must leave these exactly as they are.

Two reduced engine trials on virtual time (the aggregated GB300 rack: data-parallel
attention, speculative decoding by output kind, modelled power; the disaggregated GB200
rack: prefill → decode handoff) write their per-request records, pinned by SHA-256, and a
direct run pins the deployment's counters, modelled energy included (the records do not
carry it). numpy is pinned in requirements.txt, so the floats are the same on every machine.

A change that is meant to move the model's numbers updates the pins here, and says so.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import pytest

from agentperf.engine import cli, targets
from agentperf.simulator import virtual
from agentperf.simulator.profile import load_profile
from tests.simulator.helpers import run_agents

RECORDS = {
    "gb300-nvl72-dsv41-flash": "5f262f4305b962b9b53ecb60d689f32daf0e91a4cbae5826dd0e19c1be9cc04f",
    "gb200-nvl72-dsv41-flash": "c48947af63f0d95897116c4d49af7e8cc54fc4281565fbae736d6a87ac035d03",
}

COUNTERS = {
    "gb300-nvl72-dsv41-flash": {
        "prompt_tokens": 4454378,
        "generation_tokens": 152600,
        "prefix_queries": 4454378,
        "prefix_hits": 3065856,
        "spec_drafts": 47424,
        "spec_draft_tokens": 189696,
        "spec_accepted": 105899,
        "iterations": 3494,
        "requests_finished": 1526,
        "busy_ns": 15627972742,
        "energy_j": 371477.12549486506,
    },
    "gb200-nvl72-dsv41-flash": {
        "prompt_tokens": 4069343,
        "generation_tokens": 140900,
        "prefix_queries": 4069343,
        "prefix_hits": 2735232,
        "spec_drafts": 55561,
        "spec_draft_tokens": 166683,
        "spec_accepted": 85471,
        "iterations": 5024,
        "requests_finished": 1409,
        "busy_ns": 52231748464,
        "energy_j": 334701.471126277,
    },
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pinned") / "syn.jsonl.gz"
    argv = ["dataset", "generate", "--seed", "1", "--trajectories", "40", "--stdlib-only"]
    assert cli.main([*argv, "--out", str(path)]) == 0
    return path


@pytest.mark.parametrize("profile", sorted(RECORDS))
def test_a_reduced_trial_writes_the_pinned_records(
    profile: str, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sim: served by this tree's simulator, registered in process: the installed entry point
    # names whichever checkout the venv was installed from (a worktree would test another)
    served = []

    def this_tree(*args: Any, **kwargs: Any) -> Any:
        served.append(True)
        return virtual.sim_target(*args, **kwargs)

    monkeypatch.setitem(targets._runners, "sim", this_tree)
    out = tmp_path / "trial"
    args = [
        "trial", "--target", f"sim:{profile}", "--model", "deepseek-v4.1-flash-max",
        "--dataset", str(dataset), "--accelerators", "72", "--concurrency", "16",
        "--warmup", "10", "--duration", "30", "--min-requests", "5", "--out", str(out),
    ]  # fmt: skip
    assert cli.main(args) == 0
    assert served  # this tree's simulator served the trial
    records = (out / "requests.jsonl").read_bytes()
    assert records.count(b"\n") > 100  # a real trial: records of many requests
    assert hashlib.sha256(records).hexdigest() == RECORDS[profile]


@pytest.mark.parametrize("profile", sorted(COUNTERS))
def test_the_deployment_counters_are_the_pinned_ones(profile: str) -> None:
    summary = run_agents(load_profile(profile), agents=64, warmup_s=5.0, window_s=10.0)
    assert dataclasses.asdict(summary.counters) == COUNTERS[profile]
