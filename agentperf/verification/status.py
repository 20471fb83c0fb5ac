"""A check's status, the one definition: pass, warn or fail.

Pool-host probes and checks (agentperf/verification) produce them, the web's own checks
(runs/verification_report.py) add to them, and the report, the contract and every reader (review,
leaderboard) read them (docs/verification.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal

Status = Literal["pass", "warn", "fail"]
PASS: Final = "pass"
WARN: Final = "warn"
FAIL: Final = "fail"
STATUSES: Final[tuple[Status, ...]] = (PASS, WARN, FAIL)  # best to worst


def worst_status(statuses: Iterable[str]) -> Status:
    """The worst of ``statuses``, PASS when there are none; anything that is not a status
    counts as FAIL."""
    out: Status = PASS
    for status in statuses:
        if status == WARN:
            out = WARN
        elif status != PASS:
            return FAIL
    return out
