"""In-process targets: ``SCHEME:SPEC`` addresses that a registered runner serves.

A real endpoint is a base URL (``http://host:8000/v1``) that the engine reaches over
HTTP itself. Any other target is an address ``SCHEME:SPEC``, served by the runner
registered for SCHEME: a function that runs ``main(transport, clock)`` against SPEC and
returns its result, on whatever clock it provides. The engine defines this interface and
imports no runner; the simulator registers ``sim`` (``sim:PROFILE``, virtual time) through
the ``agentperf.targets`` entry point in pyproject.toml (docs/engine.md "Targets").

Runners come from ``register`` (a process that wires its own) or, on first use of a
scheme, from the installed entry points of that group.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from importlib.metadata import entry_points
from typing import Protocol, TypeVar

from agentperf.engine.transport import Clock, Transport

T = TypeVar("T")

ENTRY_POINT_GROUP = "agentperf.targets"
# The simulator's scheme: ``Target(sim_profile=P)`` is the address ``sim:P``.
SIM_SCHEME = "sim"

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_ADDRESS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*):(?P<spec>.*)", re.DOTALL)


class TargetRunner(Protocol):
    """Runs ``main(transport, clock)`` against the target SPEC and returns its result."""

    def __call__(
        self, spec: str, main: Callable[[Transport, Clock], Awaitable[T]], /, *, seed: int
    ) -> T: ...


class UnknownTarget(ValueError):
    """An address whose scheme no runner is registered for; the message names it."""


_runners: dict[str, TargetRunner] = {}


def register(scheme: str, runner: TargetRunner) -> None:
    """Serve ``SCHEME:SPEC`` addresses with ``runner`` in this process."""
    if not _SCHEME.fullmatch(scheme):
        raise ValueError(f"a target scheme is lower-case letters, digits, +, - or .: {scheme!r}")
    _runners[scheme] = runner


def unregister(scheme: str) -> None:
    """Forget a runner given to ``register`` (an installed entry point stays installed)."""
    _runners.pop(scheme, None)


def schemes() -> list[str]:
    """Every scheme a runner is registered or installed for."""
    return sorted(set(_runners) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def split_address(text: str) -> tuple[str, str] | None:
    """``(SCHEME, SPEC)`` of an in-process target's address; None for a URL (``…://…``)."""
    if "://" in text:
        return None
    match = _ADDRESS.fullmatch(text)
    if match is None:
        return None
    return match["scheme"], match["spec"]


def runner_for(scheme: str) -> TargetRunner:
    """The runner of ``scheme``; UnknownTarget names the scheme and the known ones."""
    found = _runners.get(scheme)
    if found is not None:
        return found
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=scheme):
        loaded = ep.load()
        if not callable(loaded):
            raise TypeError(f"entry point {ENTRY_POINT_GROUP} {scheme} = {ep.value}: not callable")
        runner: TargetRunner = loaded
        _runners[scheme] = runner
        return runner
    known = ", ".join(f"{s}:" for s in schemes()) or (
        f"none (no {ENTRY_POINT_GROUP} entry point: is the project installed? make install)"
    )
    raise UnknownTarget(f"unknown target scheme {scheme!r}; known: {known}")


def resolve(address: str) -> tuple[TargetRunner, str]:
    """The runner and SPEC of ``SCHEME:SPEC``."""
    parts = split_address(address)
    if parts is None:
        raise UnknownTarget(f"not a SCHEME:SPEC target address: {address!r}")
    scheme, spec = parts
    return runner_for(scheme), spec
