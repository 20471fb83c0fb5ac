"""The body of a ladder submission (docs/ladders.md) as a pydantic model, :class:`LadderBody`:
the ladder document (``agentperf.ladder.document.LadderDocument``, the shape the engine's
ladder file fills in too) with the platform's baseline (a deployment config or a published
result), its changes as ``rungs`` and its limits. Its JSON Schema, generated from the model,
is served at /api/v1/schema/ladder.json, is the ``LadderBody`` component of the OpenAPI
document (ladders/openapi.py) and is committed as docs/ladder.schema.json (``python manage.py shell -c "import ladders.schema as s;
s.main([])"`` writes it; tests/ladders/test_openapi.py checks that the file is the generated
one). ``baseline.config`` is a deployment config (its own schema at
/api/v1/schema/deployment-config.json) and each rung's patch a JSON Merge Patch of one.

The model checks the body's shape: an unknown key, a missing field, a value of another type
or a name two rungs share is refused by its path (``rungs.1.description``,
:func:`error_fields`). What needs the database or the deployment-config schema (the baseline
result, each rung's config, the fixed paths) is checked by ``ladders.services.ladder_create``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from agentperf.fielderrors import validation_fields
from agentperf.ladder.document import ORDERS, LadderDocument, NamedChange, Order
from catalog.models import WORKLOADS

MAX_RUNGS = 12
MAX_SPEEDS = 16  # per-agent speeds a ladder reads its gains at, besides the tiers'
DEFAULT_PATH = Path(__file__).resolve().parents[1] / "docs" / "ladder.schema.json"

CONFIG_OBJECT = {
    "type": "object",
    "description": "a deployment config: /api/v1/schema/deployment-config.json",
}


def _one_line(limit: int):
    def check(value: str) -> str:
        value = value.strip()
        if len(value) > limit or "\n" in value:
            raise ValueError(f"one line of at most {limit} characters")
        return value

    return AfterValidator(check)


def _non_empty(value: str) -> str:
    if not value:
        raise ValueError("a non-empty string")
    return value


Name = Annotated[
    str, Field(min_length=1, max_length=200), _one_line(200), AfterValidator(_non_empty)
]
Description = Annotated[
    str, Field(min_length=1, max_length=500), _one_line(500), AfterValidator(_non_empty)
]
Workload = Literal[WORKLOADS]  # type: ignore[valid-type]


class Body(BaseModel):
    """Strict: unknown keys refused, nothing coerced (``"1"`` is not a result id)."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _mapping_or_text(value: Any) -> dict[str, Any] | str:
    if not isinstance(value, dict | str):
        raise ValueError("a deployment config (mapping or YAML text)")
    return value


class BaselineConfig(Body):
    """The baseline as a deployment config: a mapping, or its YAML text."""

    name: str = ""
    config: Annotated[
        Any,
        AfterValidator(_mapping_or_text),
        WithJsonSchema({"oneOf": [CONFIG_OBJECT, {"type": "string"}]}),
    ]


class BaselineResult(Body):
    """The baseline as a published result of the same organization, by id."""

    name: str = ""
    result: int


def _baseline_kind(value: Any) -> str:
    return "result" if isinstance(value, dict) and "result" in value else "config"


Baseline = Annotated[
    Annotated[BaselineConfig, Tag("config")] | Annotated[BaselineResult, Tag("result")],
    Discriminator(_baseline_kind),
]


def _not_null(schema: dict[str, Any]) -> None:
    """An optional field's schema as the value it takes when given: null is not one."""
    schema.pop("default", None)
    branches = schema.pop("anyOf", [])
    for branch in branches:
        if branch != {"type": "null"}:
            schema.update(branch)


class Rung(Body, NamedChange):
    """One change: a JSON Merge Patch of the config, a workload, or both."""

    model_config = ConfigDict(
        json_schema_extra={"anyOf": [{"required": ["patch"]}, {"required": ["workload"]}]}
    )

    name: Name
    description: Description
    patch: Annotated[dict[str, Any], Field(min_length=1)] | None = Field(
        default=None,
        json_schema_extra=_not_null,
        description="JSON Merge Patch (RFC 7396) of the deployment config; may not touch "
        "benchmark, topology.roles or model.id",
    )
    workload: Workload | None = Field(
        default=None,
        json_schema_extra=_not_null,
        description='the workload replayed from this rung on (docs/ladders.md "Workloads"); '
        "only agentic coding is ranked",
    )

    @model_validator(mode="after")
    def _a_change(self) -> Rung:
        if self.patch is None and self.workload is None:
            raise ValueError("a change names a patch, a workload or both")
        return self

    def change(self) -> dict[str, Any]:
        """The change as the ladder's document stores it (a workload alone: an empty patch)."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "patch": self.patch if self.patch is not None else {},
        }
        if self.workload is not None:
            out["workload"] = self.workload
        return out


def _forward_first(orders: list[str]) -> list[str]:
    if not orders or orders[0] != "forward":
        raise ValueError(f"a list starting with forward, of {', '.join(ORDERS)}")
    return list(dict.fromkeys(orders))


class LadderBody(LadderDocument[Baseline, Rung]):
    """``POST /api/v1/ladders/``: a baseline and ordered changes (docs/ladders.md)."""

    model_config = ConfigDict(title="Ladder")
    duplicate_name: ClassVar[str] = "{name!r} names another rung"

    name: Name
    description: Annotated[str, Field(max_length=500), _one_line(500)] = ""
    baseline: Baseline
    changes: list[Rung] = Field(alias="rungs", min_length=1, max_length=MAX_RUNGS)
    orders: Annotated[list[Order], AfterValidator(_forward_first)] = Field(
        default_factory=lambda: ["forward"], description="starts with forward"
    )
    speeds: list[Annotated[float, Field(gt=0, lt=100_000)]] = Field(
        default_factory=list, max_length=MAX_SPEEDS
    )


def error_fields(exc: ValidationError) -> dict[str, list[str]]:
    """A validation error as the API's field map (agentperf.fielderrors), by the body's
    paths (``rungs.1.name``; the baseline's form, a discriminator's tag, is not part of the
    path)."""

    def location(loc: Sequence[Any], err: Any) -> list[Any]:
        out = list(loc)
        if out[:1] == ["baseline"] and out[1:2] in (["config"], ["result"]):
            del out[1]
        return out

    return validation_fields(exc, location=location)


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """The schema with its ``$defs`` references replaced by what they name: one document
    that the OpenAPI component and the served file carry whole."""
    if isinstance(node, list):
        return [_inline(x, defs) for x in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _inline(defs[ref.removeprefix("#/$defs/")], defs)
    return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}


def _with_config(node: Any, config: dict[str, Any]) -> Any:
    if node == CONFIG_OBJECT:
        return config
    if isinstance(node, list):
        return [_with_config(x, config) for x in node]
    if isinstance(node, dict):
        return {k: _with_config(v, config) for k, v in node.items()}
    return node


def ladder_json_schema(config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The body's schema, generated from :class:`LadderBody`; ``config`` is what
    ``baseline.config`` (as a mapping) refers to: a plain object here, the
    ``DeploymentConfig`` component in the OpenAPI document (ladders/openapi.py)."""
    generated = LadderBody.model_json_schema()
    schema = _inline(generated, generated.get("$defs", {}))
    if config is not None:
        schema = _with_config(schema, config)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def render() -> str:
    return json.dumps(ladder_json_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Write the schema to ``argv[0]`` (default docs/ladder.schema.json)."""
    path = Path(argv[0]) if argv else DEFAULT_PATH
    path.write_text(render())
    print(f"wrote {path}")
    return 0
