"""One field-error convention (agentperf/fielderrors.py): dotted paths with list indices,
non_field_errors for the document, the platform's wording, and a cross-field check placed at
the field it names; the config schema, the run contract and the ladder body all use it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from agentperf import contract
from agentperf.fielderrors import CROSS_FIELD, NON_FIELD, field_path, validation_fields
from agentperf.schema.deployment import parse_config
from agentperf.schema.loading import ConfigError
from ladders.schema import LadderBody
from ladders.schema import error_fields as ladder_fields


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int

    @field_validator("size")
    @classmethod
    def positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be at least 1")
        return value


class Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[Item]

    @model_validator(mode="after")
    def two_at_most(self) -> Doc:
        if len(self.items) > 2:
            raise PydanticCustomError(
                CROSS_FIELD, "{message}", {"path": "items.2", "message": "two items at most"}
            )
        return self


def _fields(data: Any) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        Doc.model_validate(data)
    return validation_fields(caught.value)


def test_paths_are_dotted_with_indices_and_messages_worded_once():
    assert field_path(["items", 1, "size"]) == "items.1.size"
    assert field_path([]) == NON_FIELD
    assert _fields({"items": [{"size": 1}, {"size": 0, "colour": "red"}]}) == {
        "items.1.size": ["must be at least 1"],  # no "Value error, " prefix
        "items.1.colour": ["unknown field"],
    }
    assert _fields({}) == {"items": ["required field missing"]}
    assert _fields({"items": [{"size": 1}] * 3}) == {"items.2": ["two items at most"]}


def test_the_config_the_contract_and_the_ladder_body_speak_the_same_map():
    with pytest.raises(ConfigError) as config:
        parse_config(b"schema_version: 1\ncolour: red\n", "application/yaml")
    assert "colour" in (config.value.fields or {})
    assert (config.value.fields or {})["colour"] == ["unknown field"]
    with pytest.raises(ValidationError) as trial:
        contract.Tier.model_validate({"name": "t", "max_ttft_s": 1.0, "colour": "red"})
    assert contract.error_fields(trial.value) == {
        "min_p25_output_speed": ["required field missing"],
        "colour": ["unknown field"],
    }
    with pytest.raises(ValidationError) as ladder:
        LadderBody.model_validate({"name": "x", "speeds": ["fast"], "colour": "red"})
    fields = ladder_fields(ladder.value)
    assert fields["speeds.0"] and fields["colour"] == ["unknown field"]
    assert not any("[" in path for path in fields)
