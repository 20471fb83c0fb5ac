"""The documents a published Result stores beside its points, as models: each tier's bracket
around its max agents (``Result.brackets``), a simulated result's modelled power
(``Result.modelled_power``) and band (``Result.band``), and the quality floor
(``Result.quality``). Publishing builds them (leaderboard.publishing.tier_brackets and
quality_of, leaderboard.energy.result_modelled_power, agentperf.simulator.bands.result_band)
and stores their :meth:`dump`; readers take them back with ``Result.tier_brackets``,
``Result.modelled``, ``Result.twin_band`` and ``Result.quality_floor``, parsed once per
instance. The points themselves are leaderboard/points.py.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter


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


class Quality(Document):
    """The quality floor beside the speed (docs/verification.md "quality_distribution"):
    the check's status and figures, or why there are none (``simulated``, ``not_measured``,
    ``no_reference``)."""

    model_config = ConfigDict(populate_by_name=True)  # merged with Document's

    status: Literal["pass", "warn", "fail", "simulated", "not_measured", "no_reference"]
    summary: str
    mean_kl: float | None = None
    top1_agreement: float | None = None
    class_: str | None = Field(default=None, alias="class")
    reference: JsonValue = None  # the reference deployment, as its record names it

    def dump(self) -> dict[str, Any]:
        """The stored JSON; the precision class under its stored name ``class``."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class OpenParameter(Document):
    """One open parameter of a simulated result's band: a number the deployment's
    description does not give, with its range (and nominal value) or its choices."""

    name: str
    reason: str
    range: tuple[float, float] | None = None
    nominal: float | None = None
    choices: list[str] | None = None


class BandFit(Document):
    """The fit whose ±1.96 σ pair is in the band: its record and fitted values, and where
    it is borrowed (``fit_from``), the paths it moves and why."""

    record: str
    free: dict[str, float]
    borrowed: dict[str, str] | None = None
    reason: str | None = None


class TwinBand(Document):
    """A simulated result's band (agentperf.simulator.bands.result_band): the profile's
    committed band as [speed, low, high, line] ratios to its nominal frontier, the
    treatment and the open parameters (docs/simulator.md "Bands")."""

    profile: str
    treatment: str
    treatment_note: str
    open_parameters: list[OpenParameter]
    fit: BandFit | None
    samples: list[str]
    trials: dict[str, JsonValue] | None
    cost: dict[str, JsonValue] | None
    ratios: list[tuple[float, float, float, float]]
    basis: str

    def dump(self) -> dict[str, Any]:
        """The stored JSON: an open parameter's range or choices, whichever it has."""
        return self.model_dump(mode="json", exclude_unset=True)


def quality(stored: Any) -> Quality | None:
    """``Result.quality`` read back as a model; None for a result stored without it."""
    return Quality.model_validate(stored) if stored else None


def twin_band(stored: Any) -> TwinBand | None:
    """``Result.band`` read back as a model; None without a band (a measured result, a
    profile with no committed band, or one patched by overrides)."""
    return TwinBand.model_validate(stored) if stored else None
