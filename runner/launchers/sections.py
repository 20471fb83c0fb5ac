"""Each launcher's typed section of the run spec (docs/pipeline.md "The run spec").

A launcher reads its section as the contract's model (agentperf/contract.py
``ProcessLauncher``, ``ContainerLauncher``, ``SlurmLauncher``, ``SimulatedLauncher``,
``AttachedLauncher``): the one dispatch validated, parsed once by the worker on receipt,
handed over as it is. A launch written by hand (a benchmark, a test, a config rendered
outside the platform) is read into the same model once, here, with the defaults such a
launch may leave out (``Written*``: its kind, an empty environment, the ready timeout the
launchers always took when none was given).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, model_validator

from agentperf import contract

Positive = Annotated[int, Field(ge=1)]
DEFAULT_READY_TIMEOUT_S = 600

Section = TypeVar("Section", bound=contract.Contract)


class WrittenProcess(contract.ProcessLauncher):
    """A hand-written `process` launch: the kind and env may be left out."""

    kind: Literal["process"] = "process"
    env: dict[str, str | contract.SecretRef] = Field(default_factory=dict)
    ready_timeout_s: Positive = DEFAULT_READY_TIMEOUT_S


class WrittenContainer(contract.ContainerLauncher):
    """A hand-written `container` launch: the kind and env may be left out."""

    kind: Literal["container"] = "container"
    env: dict[str, str | contract.SecretRef] = Field(default_factory=dict)
    ready_timeout_s: Positive = DEFAULT_READY_TIMEOUT_S


class WrittenSlurmRole(contract.SlurmRole):
    env: dict[str, str | contract.SecretRef] = Field(default_factory=dict)


class WrittenSlurm(contract.SlurmLauncher):
    """A hand-written `slurm` launch: no image (the `host` runtime), the default ready
    path, timeout and time limit."""

    kind: Literal["slurm"] = "slurm"
    image: str | None = None
    roles: list[WrittenSlurmRole] = Field(min_length=1)  # type: ignore[assignment]
    ready_path: str = "/health"
    ready_timeout_s: Positive = DEFAULT_READY_TIMEOUT_S
    time_limit_s: Positive = 3600


class WrittenSimulated(contract.SimulatedLauncher):
    """A hand-written `simulated` launch: a profile name is enough (seed 0, the real-time
    server, served under the profile's name)."""

    kind: Literal["simulated"] = "simulated"
    seed: int = 0
    clock: Literal["real", "virtual"] = "real"
    profile_label: str = ""
    accelerators_used: Positive = 1
    accelerators_total: Positive = 1

    @model_validator(mode="before")
    @classmethod
    def _served_as_profile(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "served_model_name" not in data:
            return {**data, "served_model_name": data.get("profile")}
        return data


class WrittenAttached(contract.AttachedLauncher):
    kind: Literal["attached"] = "attached"


def read_section(
    model: type[Section], written: type[Section], given: Section | Mapping[str, Any]
) -> Section:
    """`given` as the launcher's section: the run spec's model as it is, or a hand-written
    launch read once into ``written`` (a subclass of ``model`` with its defaults)."""
    if isinstance(given, model):
        return given
    return written.model_validate(dict(given))
