"""Why requests failed: the trial's top error reasons with their counts (docs/engine.md
"Error reasons").

A failed request's record keeps its class and detail (for an HTTP error, the server's own
message: agentperf/engine/sse.py ``server_error_message``). Details that differ only in their
numbers (token counts, ports, request ids) are one reason: every word holding a digit is
replaced by ``N``, except the status of an ``HTTP 400: `` prefix, so a 400 and a 500 stay
apart. Each reason keeps the first detail that gave it as its example.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

TOP_REASONS = 5

_HTTP_PREFIX = re.compile(r"HTTP \d{3}: ")
_WITH_DIGIT = re.compile(r"\b\w*\d\w*\b")


class ErrorReason(BaseModel):
    """One reason failed requests of a trial's window gave, and how many gave it."""

    model_config = ConfigDict(extra="forbid")

    error_class: str  # agentperf.engine.transport ERROR_CLASSES, or "unknown"
    reason: str  # the detail with every word holding a digit replaced by "N"
    count: int = Field(ge=1)
    example: str  # the first such detail, as the record keeps it


def normalise_reason(detail: str) -> str:
    """``detail`` with its numbers and ids as ``N`` (an HTTP status prefix kept)."""
    prefix = _HTTP_PREFIX.match(detail)
    kept = prefix.group(0) if prefix else ""
    return kept + _WITH_DIGIT.sub("N", detail[len(kept) :])


def error_reasons(
    failures: Iterable[tuple[str | None, str]], *, top: int = TOP_REASONS
) -> list[ErrorReason]:
    """The ``top`` most frequent reasons among ``(error_class, detail)`` of failed requests,
    most frequent first (ties: first seen first)."""
    counts: dict[tuple[str, str], int] = {}
    examples: dict[tuple[str, str], str] = {}
    for error_class, detail in failures:
        key = (error_class or "unknown", normalise_reason(detail))
        counts[key] = counts.get(key, 0) + 1
        examples.setdefault(key, detail)
    ranked = sorted(counts, key=lambda key: -counts[key])  # stable: ties stay first-seen
    return [
        ErrorReason(error_class=key[0], reason=key[1], count=counts[key], example=examples[key])
        for key in ranked[:top]
    ]
