"""The task check's pieces (docs/verification.md "quality_task"): HumanEval programs run in
the real sandbox with time and memory limits and no network, and the one-sided
two-proportion verdict against the reference deployment."""

from __future__ import annotations

import pytest

from agentperf.verification.checks import check_quality_task
from agentperf.verification.taskcheck import (
    load_problems,
    program_of,
    task_verdict,
    two_proportion_z,
)
from runner.verification.taskrun import execute


@pytest.fixture(scope="module")
def first():
    return load_problems(1)[0]


def test_the_164_problems_ship_with_the_package():
    problems = load_problems()
    assert len(problems) == 164 and problems[0]["task_id"] == "HumanEval/0"


def test_a_correct_completion_passes_and_a_wrong_one_fails(first):
    assert execute(program_of(first, first["canonical_solution"])) == (True, "passed")
    passed, detail = execute(program_of(first, "    return False\n"))
    assert not passed and "AssertionError" in detail


@pytest.mark.parametrize(
    "body, expected",
    [
        ("    while True:\n        pass\n", "timed out"),
        ("    x = bytearray(4 * 1024 ** 3)\n    return x\n", "MemoryError"),
        (
            "    import socket\n    socket.create_connection(('127.0.0.1', 5432), timeout=2)\n"
            "    return True\n",
            "ConnectionRefusedError",
        ),
        ("    open('/etc/passwd-written', 'w')\n    return True\n", "Error"),
    ],
)
def test_a_hostile_or_runaway_completion_is_contained(first, body, expected):
    passed, detail = execute(program_of(first, body))
    assert not passed and expected in detail, detail


def test_the_two_proportion_test_refuses_only_a_significantly_lower_score():
    assert two_proportion_z(50, 100, 50, 100) == 0.0
    assert (
        task_verdict(
            {"passed": 30, "problems": 100, "pass_at_1": 0.3},
            {"passed": 50, "problems": 100, "pass_at_1": 0.5},
        )[0]
        == "fail"
    )
    assert (
        task_verdict(
            {"passed": 45, "problems": 100, "pass_at_1": 0.45},
            {"passed": 50, "problems": 100, "pass_at_1": 0.5},
        )[0]
        == "pass"
    )
    assert (
        task_verdict(
            {"passed": 0, "problems": 6, "pass_at_1": 0.0},
            {"passed": 0, "problems": 6, "pass_at_1": 0.0},
        )[0]
        == "n/a"
    )


def _probe(phase, outcomes, concurrency=None):
    evidence = {"outcomes": outcomes, **({"concurrency": concurrency} if concurrency else {})}
    return {"name": f"task_{phase}", "status": "pass", "summary": "s", "evidence": evidence}


def test_the_check_fails_when_quality_drops_under_load_and_says_no_reference_without_one():
    ids = [f"HumanEval/{i}" for i in range(40)]
    reference = {
        "tasks": {"suite": "humaneval", "outcomes": [{"task_id": t, "passed": True} for t in ids]}
    }
    idle = _probe("idle", [{"task_id": t, "passed": True, "detail": "passed"} for t in ids])
    loaded = _probe(
        "under_load",
        [{"task_id": t, "passed": i < 20, "detail": "x"} for i, t in enumerate(ids)],
        concurrency=64,
    )
    check = check_quality_task([idle, loaded], reference, model="m")
    assert check["status"] == "fail"
    assert check["evidence"]["phases"]["idle"]["verdict"] == "pass"
    assert check["evidence"]["phases"]["under_load"]["verdict"] == "fail"
    assert check["evidence"]["phases"]["under_load"]["concurrency"] == 64
    none = check_quality_task([idle], None, model="m")
    assert none["status"] == "warn" and "no reference score" in none["summary"]
