"""The ladder document (docs/engine.md "ladder", docs/ladders.md): a baseline, ordered named
changes, the orders they are applied in and the speeds the gains are read at — one pydantic
shape, :class:`LadderDocument`, that both ways of handing in a ladder fill in:

- the engine's YAML (``python -m agentperf.engine ladder --steps FILE``) is
  :class:`LadderFile`: the baseline is a target (an endpoint, or ``sim:PROFILE`` plus a
  merge patch), the changes are ``steps``, and the file also names the conditions every rung
  is measured under (dataset, tiers, trials, bootstrap, band). ``agentperf.ladder.spec``
  builds the engine's ``LadderSpec`` from it.
- the platform's body (``POST /api/v1/ladders/``) is ``ladders.schema.LadderBody``: the
  baseline is a deployment config or a published result, the changes are ``rungs``, and the
  platform's limits apply; the conditions are the pool's, so the body has none.

Each side spells the list of changes its own way (the field's alias), so an error names the
field as the document wrote it: ``steps.1.patch`` in the file (the engine's CLI prints it
``steps[1].patch``), ``rungs.1.patch`` in the body (agentperf.fielderrors). The file's
fields keep the engine's wording for what they refuse ("expected a non-empty string",
"unknown key (allowed: …)").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidatorFunctionWrapHandler,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agentperf.engine.datasets.synthetic import SHAPES
from agentperf.engine.trial import parse_tiers
from agentperf.fielderrors import CROSS_FIELD
from agentperf.simulator.profile_types import OUTPUT_KINDS

Order = Literal["forward", "reverse", "leave_one_out"]
ORDERS: tuple[str, ...] = get_args(Order)
DEFAULT_RESAMPLES = 200
DEFAULT_CONFIDENCE = 0.95
DEFAULT_TIER_SET = "agentperf-default-v1"


def is_sim(target: str) -> bool:
    """A target on the twin (``sim:PROFILE``), not an endpoint."""
    return target.startswith("sim:")


def field_error(path: str, message: str) -> PydanticCustomError:
    """An error a model-level check places at ``path`` below the model (agentperf.fielderrors
    CROSS_FIELD)."""
    return PydanticCustomError(CROSS_FIELD, "{message}", {"path": path, "message": message})


class NamedChange(BaseModel):
    """What every change has, on either side: a name (once per ladder) and a description."""

    name: str
    description: str


BaselineT = TypeVar("BaselineT")
ChangeT = TypeVar("ChangeT", bound=NamedChange)


class LadderDocument(BaseModel, Generic[BaselineT, ChangeT]):
    """A ladder: a baseline and ordered named changes; rung 0 is the baseline and rung *i*
    the baseline with changes 1…i applied, in each of ``orders``. Strict: an unknown key is
    refused and nothing is coerced. Each side (:class:`LadderFile`, ``LadderBody``) gives the
    baseline's and the changes' types, the changes' key and its own limits."""

    model_config = ConfigDict(extra="forbid", strict=True)

    # how a second change of the same name is refused, in the side's words
    duplicate_name: ClassVar[str] = "{name!r} names another change"

    name: str
    description: str = ""
    baseline: BaselineT
    changes: list[ChangeT]
    orders: list[Order] = ["forward"]
    speeds: list[float] = []

    @model_validator(mode="after")
    def _each_change_named_once(self) -> LadderDocument[BaselineT, ChangeT]:
        key = type(self).model_fields["changes"].validation_alias or "changes"
        seen: set[str] = set()
        for i, change in enumerate(self.changes):
            if change.name in seen:
                message = self.duplicate_name.format(name=change.name)
                raise field_error(f"{key}.{i}.name", message)
            seen.add(change.name)
        return self


# ------------------------------------------------------------- the engine's field rules


def _rule(ok: Callable[[Any], bool], message: str) -> BeforeValidator:
    """A field's check in the engine's wording: a value ``ok`` refuses is refused with
    ``message`` (before pydantic's own, stricter type check)."""

    def check(value: Any) -> Any:
        if not ok(value):
            raise ValueError(message)
        return value

    return BeforeValidator(check)


def _number(value: Any) -> bool:
    return isinstance(value, int | float)


def _non_blank(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _one_line(value: str) -> str:
    value = value.strip()
    if "\n" in value:
        raise ValueError("one line")
    return value


def _none_or_positive_ints(value: Any) -> bool:
    if value is None:
        return True
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(n, int) and n >= 1 for n in value)
    )


def _absent_is_empty(value: Any) -> Any:
    return "" if value is None else value


def _or_empty_mapping(value: Any) -> Any:
    return value or {}


def _required() -> Any:
    """A required field the engine names itself when absent ("expected a non-empty
    string"): its rule sees the absent value as null."""
    return Field(default=None, validate_default=True)


NonBlank = Annotated[str, _rule(_non_blank, "expected a non-empty string")]
Text = Annotated[  # optional text: absent or null reads "" (before validators run last first)
    str,
    _rule(lambda v: isinstance(v, str), "expected a non-empty string"),
    BeforeValidator(_absent_is_empty),
]
OneLine = Annotated[NonBlank, AfterValidator(_one_line)]
MergePatch = Annotated[  # RFC 7396, of the sim profile
    dict[str, Any] | None,
    _rule(lambda v: v is None or isinstance(v, dict), "a JSON Merge Patch must be a mapping"),
]
PositiveInt = Annotated[int, _rule(lambda v: isinstance(v, int) and v >= 1, "a positive integer")]
Seconds = Annotated[
    float, _rule(lambda v: _number(v) and v >= 0, "a non-negative number of seconds")
]


class EngineModel(BaseModel):
    """A mapping of the engine's YAML: its keys are its fields (in the engine's words when
    not: "unknown key (allowed: …)"); nothing is coerced."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _a_mapping_of_known_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ValueError("expected a mapping")
        known = {
            alias if isinstance(alias := f.validation_alias, str) else name
            for name, f in cls.model_fields.items()
        }
        unknown = sorted(str(k) for k in set(data) - known)
        if unknown:
            allowed = ", ".join(sorted(known))
            raise field_error(unknown[0], f"unknown key (allowed: {allowed})")
        return data


class Generate(EngineModel):
    """A synthetic dataset (docs/datasets.md): seeded, ``trajectories`` sessions, a shape."""

    seed: Annotated[int, _rule(lambda v: isinstance(v, int), "expected an integer")] = 1
    trajectories: Annotated[int, _rule(lambda v: isinstance(v, int), "expected an integer")] = 200
    shape: Annotated[str, _rule(lambda v: v in SHAPES, f"one of {', '.join(SHAPES)}")] = "coding"


class DatasetDoc(EngineModel):
    """The work every rung replays: a dataset file (``path``, relative to the ladder file)
    or a generated one; ``output_kind`` makes every turn's text one kind (a chat-like
    workload)."""

    path: str | None = None
    generate: Generate | None = None
    output_kind: Annotated[
        str | None, _rule(lambda v: v in OUTPUT_KINDS, f"one of {', '.join(OUTPUT_KINDS)}")
    ] = None
    label: str | None = None

    _written: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _remember_as_written(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        doc = handler(data)
        doc._written = dict(data)
        return doc

    @model_validator(mode="after")
    def _one_source(self) -> DatasetDoc:
        if (self.path is None) == (self.generate is None):
            raise ValueError("give exactly one of path or generate")
        return self

    def as_written(self) -> dict[str, Any]:
        """The mapping as the file wrote it: ladder.json carries it in the file's key order."""
        return dict(self._written)


class TargetBaseline(EngineModel):
    """The engine's baseline: a target, with a merge patch when it is ``sim:PROFILE``."""

    name: NonBlank = "baseline"
    description: Text = ""
    target: NonBlank = _required()
    patch: MergePatch = None


class Step(EngineModel, NamedChange):
    """One change of the engine's ladder: a merge patch of the sim profile, a new target (the
    vendor redeployed) or a new dataset, from this rung on."""

    name: NonBlank = _required()
    description: OneLine = _required()
    patch: MergePatch = None
    target: Annotated[
        str | None, _rule(lambda v: v is None or _non_blank(v), "expected a non-empty string")
    ] = None
    dataset: DatasetDoc | None = None

    @model_validator(mode="after")
    def _changes_something(self) -> Step:
        if self.patch is None and self.target is None and self.dataset is None:
            raise ValueError("a change needs a patch, a target or a dataset")
        return self


class Search(EngineModel):
    """A capped search for each rung's frontier (docs/engine.md "search")."""

    cap: PositiveInt = 1024
    max_trials: PositiveInt = 12


class Trials(EngineModel):
    """Each rung's trial plan: fixed concurrencies or a capped search, and the windows."""

    concurrencies: Annotated[
        list[int] | None, _rule(_none_or_positive_ints, "a list of positive integers")
    ] = None
    search: Search | None = None
    warmup_s: Seconds = 30.0
    duration_s: Annotated[
        float, _rule(lambda v: _number(v) and v > 0, "a non-negative number of seconds")
    ] = 60.0
    ramp_s: Seconds = 15.0
    min_requests: PositiveInt = 20
    # fixed concurrencies: stop after the first trial slower than this (tok/s per agent)
    stop_below: Annotated[
        float | None,
        _rule(lambda v: v is None or (_number(v) and v > 0), "a positive speed, tok/s per agent"),
    ] = None

    @model_validator(mode="after")
    def _one_plan(self) -> Trials:
        if (self.concurrencies is None) == (self.search is None):
            raise ValueError("give exactly one of concurrencies or search")
        return self


class Bootstrap(EngineModel):
    """The intervals' bootstrap by agent session."""

    resamples: Annotated[
        int, _rule(lambda v: isinstance(v, int) and v >= 0, "a non-negative integer")
    ] = DEFAULT_RESAMPLES
    confidence: Annotated[float, _rule(lambda v: _number(v) and 0 < v < 1, "in (0, 1)")] = (
        DEFAULT_CONFIDENCE
    )


class BandSample(EngineModel):
    name: NonBlank = _required()
    patch: Annotated[MergePatch, _rule(bool, "required")] = _required()


class BandSamples(EngineModel):
    """``band: {samples: [{name, patch}, …]}``: merge patches of the baseline profile."""

    samples: Annotated[
        list[BandSample],
        _rule(lambda v: isinstance(v, list) and bool(v), "a non-empty list of {name, patch}"),
    ] = _required()


def _band_kind(value: Any) -> str:
    return "open" if value == "open" else "samples"


# docs/simulator.md "Bands": ``open`` (the baseline profile's open parameters) or samples
Band = Annotated[
    Annotated[Literal["open"], Tag("open")] | Annotated[BandSamples, Tag("samples")],
    Discriminator(_band_kind),
]


def _orders(value: Any) -> Any:
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not value or any(o not in ORDERS for o in value):
        raise ValueError(f"a list of {', '.join(ORDERS)}")
    return value


def _once_each(orders: list[str]) -> list[str]:
    return list(dict.fromkeys(orders))


def _speeds(value: Any) -> Any:
    value = value or []
    if not isinstance(value, list) or not all(_number(x) and x > 0 for x in value):
        raise ValueError("expected a list of positive numbers (tok/s per agent)")
    return [float(x) for x in value]


def _tier_source(value: Any) -> Any:
    if not isinstance(value, str | list | dict):
        parse_tiers(value)  # refused, in the tier parser's words
    return value


def _dataset_given(value: Any) -> Any:
    if value is None:
        raise ValueError("required (path: FILE or generate: {seed, trajectories})")
    return value


class LadderFile(LadderDocument[TargetBaseline, Step], EngineModel):
    """The engine's ladder YAML (docs/engine.md "ladder"); ``agentperf.ladder.spec`` builds
    the LadderSpec from it, resolving ``tiers`` and ``band: open``."""

    duplicate_name: ClassVar[str] = "{name!r} is already a step's name"

    name: NonBlank = _required()
    description: Text = ""
    baseline: TargetBaseline = _required()
    changes: Annotated[
        list[Step],
        _rule(lambda v: isinstance(v, list) and bool(v), "expected a non-empty list of changes"),
    ] = Field(default=None, validate_default=True, validation_alias="steps")
    orders: Annotated[list[Order], BeforeValidator(_orders), AfterValidator(_once_each)] = [
        "forward"
    ]
    speeds: Annotated[list[float], BeforeValidator(_speeds)] = []
    dataset: Annotated[DatasetDoc, BeforeValidator(_dataset_given)] = _required()
    # a catalog tier set's slug, a JSON file (relative to the ladder file) or the tiers inline
    tiers: Annotated[str | list[Any] | dict[str, Any], BeforeValidator(_tier_source)] = (
        DEFAULT_TIER_SET
    )
    trials: Annotated[Trials, BeforeValidator(_or_empty_mapping)] = _required()
    seed: Annotated[int, _rule(lambda v: isinstance(v, int), "an integer")] = 0
    bootstrap: Annotated[Bootstrap, BeforeValidator(_or_empty_mapping)] = Bootstrap()
    model: str | None = None
    accelerators: Annotated[
        int | None,
        _rule(lambda v: v is None or (isinstance(v, int) and v >= 1), "a positive integer"),
    ] = None
    simulated: bool | None = None  # accepted; a ladder is simulated when its targets are
    band: Band | None = None

    def target_at(self, index: int) -> str:
        """The target that change ``index`` applies to: the latest one named before it."""
        target = self.baseline.target
        for change in self.changes[:index]:
            target = change.target or target
        return target

    @model_validator(mode="after")
    def _band_on_the_twin(self) -> LadderFile:
        if self.band is not None and not is_sim(self.baseline.target):
            message = "bands are for ladders on the twin (a sim:PROFILE baseline)"
            raise field_error("band", message)
        return self

    @model_validator(mode="after")
    def _patches_on_the_twin(self) -> LadderFile:
        for i, change in enumerate(self.changes):
            if change.patch is not None and not is_sim(change.target or self.target_at(i)):
                raise field_error(
                    f"steps.{i}.patch",
                    "a patch applies to a sim:PROFILE target; on an endpoint the change is "
                    "the new deployment (give its target)",
                )
        return self

    @model_validator(mode="after")
    def _an_endpoint_names_its_model(self) -> LadderFile:
        if not is_sim(self.baseline.target) and (self.model is None or self.accelerators is None):
            path = "model" if self.model is None else "accelerators"
            raise field_error(
                path, "required when a target is an endpoint (model and accelerators)"
            )
        return self
