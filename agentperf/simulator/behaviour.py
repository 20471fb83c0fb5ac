"""How the simulated deployment answers, as a plugin: the seam through which a test makes the
twin misbehave, so the production server and transport carry no misbehaviour of their own.

A deployment asks its `Behaviour` six questions (the profile it really runs, the lengths it
generates and reports, the body its prefix cache keys on, the cached tokens it reports, the
text it writes, the accelerators its host shows); `HONEST` answers each as the model says.
The verification tests' dishonest modes (tests/support/dishonest.py, docs/verification.md
"Dishonest modes") are a behaviour given in process (`SimTransport(behaviour=…)`,
`run_with_simulator(behaviour=…)`) or, to the real-time server in its own process, by name:
``--behaviour MODULE:FACTORY[=ARG]`` (`load_behaviour`).
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from agentperf.simulator.prompts import filler


class Behaviour(Protocol):
    def __bool__(self) -> bool:
        """False for an honest deployment (it may then take the fast paths)."""
        ...

    def profile(self, profile: Any) -> Any: ...

    def lengths(self, stop_at: int, *, in_flight: int) -> tuple[int, int]:
        """(tokens really generated, completion_tokens reported) for an answer of
        ``stop_at`` tokens with ``in_flight`` requests in flight."""
        ...

    def prefix_body(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def cached(self, cached: int, prompt_tokens: int) -> int: ...

    def text(self, n: int, start: int = 0) -> str: ...

    def accelerators_seen(self, used: int) -> int: ...


class Honest:
    """The deployment as the model says: every answer the one the profile gives."""

    def __bool__(self) -> bool:
        return False

    def profile(self, profile: Any) -> Any:
        return profile

    def lengths(self, stop_at: int, *, in_flight: int) -> tuple[int, int]:
        return stop_at, stop_at

    def prefix_body(self, body: dict[str, Any]) -> dict[str, Any]:
        return body

    def cached(self, cached: int, prompt_tokens: int) -> int:
        return cached

    def text(self, n: int, start: int = 0) -> str:
        return filler(n, start)

    def accelerators_seen(self, used: int) -> int:
        return used


HONEST: Behaviour = Honest()


def load_behaviour(spec: str | None) -> Behaviour:
    """``MODULE:FACTORY[=ARG]`` → ``FACTORY(ARG)`` (or ``FACTORY()``) from that module; None
    or empty → HONEST. A ValueError names what could not be loaded."""
    if not spec:
        return HONEST
    target, _, arg = spec.partition("=")
    module_name, _, factory_name = target.partition(":")
    if not module_name or not factory_name:
        raise ValueError(f"behaviour {spec!r}: expected MODULE:FACTORY[=ARG]")
    try:
        factory = getattr(importlib.import_module(module_name), factory_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"behaviour {spec!r}: {exc}") from exc
    behaviour: Behaviour = factory(arg) if arg else factory()
    return behaviour
