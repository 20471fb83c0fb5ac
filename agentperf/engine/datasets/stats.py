"""Distributions of a dataset, to check its shape (``dataset stats``).

Input tokens per turn are the local cl100k counts when the dataset carries them, else the
recorded prompt tokens; turns with neither are left out. Tool delays are taken over turns
that are followed by another turn (the delay after a session's last turn never runs).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentperf.engine.trajectory import Dataset


@dataclass(frozen=True, slots=True)
class Summary:
    count: int
    min: float
    mean: float
    p50: float
    p95: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        if not values:
            nan = math.nan
            return cls(0, nan, nan, nan, nan, nan)
        ordered = sorted(values)
        return cls(
            count=len(ordered),
            min=ordered[0],
            mean=sum(ordered) / len(ordered),
            p50=quantile(ordered, 0.5),
            p95=quantile(ordered, 0.95),
            max=ordered[-1],
        )


def quantile(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of sorted values (numpy's default method)."""
    if not ordered:
        return math.nan
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class DatasetStats:
    trajectories: int
    turns: int
    input_tokens: Summary
    output_tokens: Summary
    tool_delay_s: Summary
    turns_per_trajectory: Summary
    languages: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def dataset_stats(dataset: Dataset) -> DatasetStats:
    inputs: list[float] = []
    outputs: list[float] = []
    delays: list[float] = []
    turns_per: list[float] = []
    languages: Counter[str] = Counter()
    for trajectory in dataset.trajectories:
        turns_per.append(len(trajectory.turns))
        languages[str(trajectory.metadata.get("language", "unknown"))] += 1
        for size in trajectory.prompt_tokens():
            if size is not None:
                inputs.append(size)
        for k, turn in enumerate(trajectory.turns):
            outputs.append(turn.target_output_tokens)
            if k < len(trajectory.turns) - 1:
                delays.append(turn.tool_delay_s)
    return DatasetStats(
        trajectories=len(dataset.trajectories),
        turns=sum(len(t.turns) for t in dataset.trajectories),
        input_tokens=Summary.of(inputs),
        output_tokens=Summary.of(outputs),
        tool_delay_s=Summary.of(delays),
        turns_per_trajectory=Summary.of(turns_per),
        languages=dict(sorted(languages.items(), key=lambda kv: (-kv[1], kv[0]))),
    )


def format_stats(stats: DatasetStats) -> str:
    """A plain-text table for terminals and logs."""
    lines = [f"trajectories {stats.trajectories}   turns {stats.turns}"]
    header = f"{'':24}{'count':>8}{'min':>10}{'mean':>10}{'p50':>10}{'p95':>10}{'max':>10}"
    lines.append(header)
    rows = (
        ("input tokens / turn", stats.input_tokens, 0),
        ("output tokens / turn", stats.output_tokens, 0),
        ("tool delay s", stats.tool_delay_s, 3),
        ("turns / trajectory", stats.turns_per_trajectory, 1),
    )
    for label, s, digits in rows:
        values = "".join(f"{v:>10.{digits}f}" for v in (s.min, s.mean, s.p50, s.p95, s.max))
        lines.append(f"{label:24}{s.count:>8}{values}")
    langs = ", ".join(f"{k} {v}" for k, v in stats.languages.items())
    lines.append(f"languages ({len(stats.languages)}): {langs}")
    return "\n".join(lines)
