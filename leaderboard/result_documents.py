"""The documents a published Result stores beside its points, as models: each tier's bracket
around its max agents (``Result.brackets``) and a simulated result's modelled power
(``Result.modelled_power``). Publishing builds them (leaderboard.publishing.tier_brackets,
leaderboard.energy.result_modelled_power) and stores their :meth:`dump`; readers take them
back with ``Result.tier_brackets`` and ``Result.modelled``, parsed once per instance.
The points themselves are leaderboard/points.py.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def dump(self) -> dict[str, Any]:
        """The stored JSON (every field)."""
        return self.model_dump(mode="json")


class TierBracket(Document):
    """The search's bracket around a tier's max agents and how sure it is (docs/engine.md
    "Search decisions"): ``marginal`` when a trial at either bound had its verdict marginal
    (docs/verification.md "Statistics")."""

    highest_pass: int
    lowest_fail: int | None  # None: never failed
    confirmed: bool
    marginal: bool
    flags: list[str]


class TierModelledPower(Document):
    """A tier's modelled power at its max agents (the mean over the trials there)."""

    max_agents: int
    power_w: float
    agents_per_mw: float
    tokens_per_joule: float | None


class ModelledPower(Document):
    """A simulated result's modelled power per tier, labelled "modelled" wherever shown
    (docs/simulator.md); never on a measured result."""

    label: str
    method: str
    trials_modelled: int
    trials: int
    tiers: dict[str, TierModelledPower]


BRACKETS: TypeAdapter[dict[str, TierBracket]] = TypeAdapter(dict[str, TierBracket])


def tier_brackets(stored: Any) -> dict[str, TierBracket]:
    """``Result.brackets`` read back as models ({} for a result stored without them)."""
    return BRACKETS.validate_python(stored or {})


def modelled_power(stored: Any) -> ModelledPower | None:
    """``Result.modelled_power`` read back as a model; None on a measured result."""
    return ModelledPower.model_validate(stored) if stored else None
