"""The task check's execution on the pool host: every HumanEval completion run as a program
in the launch sandbox (runner/launchers/sandbox.py) with time and memory limits, and pass@1
over them (docs/verification.md "quality_task"). The problems, the requests and the verdict
are agentperf/verification/taskcheck.py."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from agentperf.verification.taskcheck import (
    EXEC_CPU_S,
    EXEC_MEMORY_BYTES,
    EXEC_TIMEOUT_S,
    SUITE,
    program_of,
)
from runner.launchers.base import LauncherError
from runner.launchers.sandbox import SANDBOX_DIR, Sandbox


def execute(program: str) -> tuple[bool, str]:
    """(passed, detail) of running `program` in the sandbox with time and memory limits."""
    work = Path(tempfile.mkdtemp(prefix="agentperf-task-"))
    (work / "program.py").write_text(program)
    (work / "program.py").chmod(0o644)
    sandbox = Sandbox(work_dir=str(work), env={}, read_only=[], serves=False)
    argv = [
        "timeout",
        "-s",
        "KILL",
        f"{EXEC_TIMEOUT_S:g}",
        "prlimit",
        f"--as={EXEC_MEMORY_BYTES}",
        f"--cpu={EXEC_CPU_S}",
        "--nproc=64",
        "python",
        "-I",
        f"{SANDBOX_DIR}/program.py",
    ]
    log = tempfile.TemporaryFile()
    try:
        process = sandbox.start(argv, log=log)
        try:
            code = process.wait(timeout=EXEC_TIMEOUT_S + 5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return False, "timed out"
    except LauncherError as exc:
        return False, f"sandbox: {exc}"[:200]
    finally:
        sandbox.stop()
    log.seek(0)
    tail = log.read()[-300:].decode(errors="replace").strip().splitlines()
    log.close()
    if code == 0:
        return True, "passed"
    reason = "timed out" if code in (124, 137, -9) else (tail[-1] if tail else f"exit {code}")
    return False, reason[:200]


def score(problems: list[dict[str, Any]], completions: list[dict[str, Any]]) -> dict[str, Any]:
    """Execute every completion; the evidence: per-problem outcomes and pass@1."""
    by_id = {p["task_id"]: p for p in problems}
    outcomes = []
    started = time.monotonic()
    for item in completions:
        if not item["ok"]:
            outcomes.append({"task_id": item["task_id"], "passed": False, "detail": item["error"]})
            continue
        passed, detail = execute(program_of(by_id[item["task_id"]], item["completion"]))
        outcomes.append(
            {
                "task_id": item["task_id"],
                "passed": passed,
                "detail": detail,
                "completion": item["completion"][:2000],
            }
        )
    passed_count = sum(bool(o["passed"]) for o in outcomes)
    return {
        "suite": SUITE,
        "problems": len(outcomes),
        "passed": passed_count,
        "pass_at_1": round(passed_count / len(outcomes), 4) if outcomes else None,
        "execution_s": round(time.monotonic() - started, 1),
        "outcomes": outcomes,
    }
