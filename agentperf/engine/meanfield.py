"""Mean-field trials: a trial of N agents on a simulated deployment run as N/k agents on a
1/k slice of it (docs/engine.md "Mean-field trials").

A rack's data-parallel ranks (or a deployment's replicas) each serve their share of the
agents; the slice keeps 1/k of them and the agents that share, while the simulator prices
the terms pooled over the whole rack (expert-parallel GEMMs, weights touched, EP
imbalance) at the whole rack's tokens (docs/simulator.md "Mean-field trials"). Per-agent
figures (output speed, TTFT) and throughput per accelerator are those of the whole, within
the tolerance docs/benchmarks.md measures; the trial costs 1/k of the CPU. It is an
approximation, used only when asked (``MeanField``), only on virtual time, and each such
trial says so in its ``trial.json`` (``mean_field``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agentperf.engine.replay import ARRIVAL_OPEN
from agentperf.engine.transport import Transport
from agentperf.engine.trial import TrialConfig


@runtime_checkable
class Sliceable(Protocol):
    """A simulated target that can serve a 1/k slice of its deployment."""

    def mean_field_factors(self) -> tuple[int, ...]:
        """The k the deployment can be cut into (1 first)."""
        ...

    def thinned(self, k: int) -> Transport:
        """A transport to the 1/k slice, on the same clock (the same one each time)."""
        ...


class MeanFieldError(ValueError):
    """Mean-field trials were asked for where they cannot run."""


@dataclass(slots=True, frozen=True)
class MeanField:
    """Run a trial of N agents on a 1/k slice when N/k is still ``min_agents`` or more:
    the largest k the deployment allows that divides N and the accelerator counts."""

    min_agents: int

    def __post_init__(self) -> None:
        if self.min_agents < 1:
            raise MeanFieldError(f"mean-field trials need at least 1 agent, not {self.min_agents}")

    def factor(self, config: TrialConfig, factors: Iterable[int]) -> int:
        n = config.concurrency
        best = 1
        for k in factors:
            if (
                k > best
                and n % k == 0
                and n // k >= self.min_agents
                and config.accelerators % k == 0
                and (config.accelerators_total is None or config.accelerators_total % k == 0)
            ):
                best = k
        return best


def check_mean_field(mean_field: MeanField | None, *, simulated: bool, arrival: str) -> None:
    """Refuse mean-field trials on a real endpoint or with open-loop arrivals."""
    if mean_field is None:
        return
    if not simulated:
        raise MeanFieldError(
            "mean-field trials need a simulated target (sim:PROFILE): a real server cannot "
            "be cut into slices"
        )
    if arrival == ARRIVAL_OPEN:
        raise MeanFieldError("mean-field trials work with the closed loop (--concurrency)")


def slice_trial(
    transport: Transport, config: TrialConfig, mean_field: MeanField | None, *, virtual: bool
) -> tuple[Transport, TrialConfig, dict[str, Any]]:
    """The transport and settings a trial runs on, and its ``mean_field`` record ({} when
    it runs whole)."""
    if mean_field is None or not virtual or not isinstance(transport, Sliceable):
        return transport, config, {}
    k = mean_field.factor(config, transport.mean_field_factors())
    if k == 1:
        return transport, config, {}
    total = config.accelerators_total
    sliced = dataclasses.replace(
        config,
        concurrency=config.concurrency // k,
        accelerators=config.accelerators // k,
        accelerators_total=None if total is None else total // k,
    )
    record = {
        "factor": k,
        "concurrency": config.concurrency,
        "accelerators": config.accelerators,
        "accelerators_total": total,
        "min_agents": mean_field.min_agents,
    }
    return transport.thinned(k), sliced, record
