"""The building blocks every section of the deployment config is made of (docs/api.md "The
config, in short"): the strict base model, the field types (slugs, pinned image references,
revisions, model names), the error a cross-field check raises at a field's path, and a
credential given by name — ``{secret: NAME}`` as an argument or an environment value
(docs/security.md "Secrets in configs")."""

from __future__ import annotations

import datetime as dt
import json
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agentperf.fielderrors import CROSS_FIELD

Slug = Annotated[
    str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]*$", min_length=1, max_length=100)
]
ShortText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
LongText = Annotated[str, StringConstraints(max_length=5000)]
# registry host[:port], then path components as the OCI distribution spec writes them (no
# empty, `.` or `..` component: a reference is a name, never a path), pinned by digest
ImageRef = Annotated[
    str,
    StringConstraints(
        pattern=r"^[a-z0-9]+(?:[.-][a-z0-9]+)*(?::[0-9]+)?"
        r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)+@sha256:[0-9a-f]{64}$",
        max_length=300,
    ),
]
# a weights revision: a commit, a tag or branch, or a file digest; never free text (a
# credential written as `token: …` there was published)
Revision = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True,
        pattern=r"^(sha256:[0-9a-f]{64}|[A-Za-z0-9][A-Za-z0-9._/+-]{0,127})$",
        max_length=200,
    ),
]
# the model id a server answers to: it is written into a Slurm job script and request
# bodies, so one line with no control characters
ModelName = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True, pattern=r"^[^\x00-\x1f\x7f]+$", min_length=1, max_length=200
    ),
]
GitCommit = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{7,40}$")]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=100)]


def field_error(path: str, message: str) -> PydanticCustomError:
    """An error whose location is `path` below the object that raises it."""
    return PydanticCustomError(CROSS_FIELD, "{message}", {"path": path, "message": message})


class Strict(BaseModel):
    """Every object of the config: unknown fields refused, strict types."""

    # strict types (docs/security.md "Input limits"): `true` is not an integer, `"2"` not a
    # number, 1 not a bool
    model_config = ConfigDict(extra="forbid", validate_default=True, strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_int_literals(cls, value: Any, info: ValidationInfo) -> Any:
        """Strict mode still lets Literal[1] take `true` and Literal[True] take 1 (1 == True
        in Python); a literal takes only its own type."""
        field = cls.model_fields.get(info.field_name or "")
        if field is None or get_origin(field.annotation) is not Literal:
            return value
        allowed = get_args(field.annotation)
        confused = isinstance(value, bool) != isinstance(allowed[0], bool)
        if confused and isinstance(value, int) and value in allowed:
            raise ValueError(f"must be {' or '.join(json.dumps(a) for a in allowed)}")
        return value


def _iso_date(value: Any) -> Any:
    """JSON has no date type: an ISO `YYYY-MM-DD` string is the date (YAML gives a date)."""
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value) if len(value) == 10 else value
        except ValueError:
            return value  # the strict date check names the field
    return value


IsoDate = Annotated[dt.date, BeforeValidator(_iso_date)]


_ENV_NAME_SCHEMA = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "maxLength": 100}


def _secret_name_schema(schema: dict[str, Any], *, argument: bool) -> None:
    """The JSON Schema says what the validators accept: ``{secret: NAME}`` or the long form."""
    schema["properties"]["secret"] = {
        "anyOf": [{"const": True}, _ENV_NAME_SCHEMA],
        "description": "NAME, the runner host's environment variable (or true: the long form).",
    }
    if argument:
        schema["required"] = ["secret"]
        schema["if"] = {"properties": {"secret": {"const": True}}}
        schema["then"] = {"required": ["name"]}
        schema["else"] = {"not": {"required": ["name"]}}


class SecretRef(Strict):
    """An environment value given by name: ``{secret: NAME}`` under the variable NAME (or the
    long form ``{secret: true}``); the runner host supplies its own variable's value."""

    model_config = ConfigDict(
        extra="forbid",
        validate_default=True,
        strict=True,
        json_schema_extra=lambda schema: _secret_name_schema(schema, argument=False),
    )

    secret: Literal[True] = Field(description="Always true: the value is not in the config.")


EnvValue = Annotated[str, StringConstraints(max_length=4000)] | SecretRef


# Variables that choose which accelerators a process or a container runtime's hook sees:
# the pool grants the devices (docs/security.md "Devices"), never the config. On a pool whose
# Podman uses the legacy nvidia hook, NVIDIA_VISIBLE_DEVICES=all would expose every GPU.
DEVICE_VARIABLES = frozenset(
    {
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "NVIDIA_MIG_CONFIG_DEVICES",
        "NVIDIA_MIG_MONITOR_DEVICES",
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "ZE_AFFINITY_MASK",
        "NEURON_RT_VISIBLE_CORES",
    }
)


def _secret_env(value: Any) -> Any:
    """``{VAR: {secret: VAR}}`` in the long form ``{VAR: {secret: true}}``; a different name
    is refused at ``env.VAR`` (the runner host reads a variable of the same name), and so is
    a variable that chooses devices (DEVICE_VARIABLES)."""
    if not isinstance(value, dict):
        return value
    out: dict[Any, Any] = {}
    for key, item in value.items():
        if isinstance(key, str) and key.upper() in DEVICE_VARIABLES:
            raise field_error(
                key,
                "chooses the accelerators a process sees: the pool grants exactly the "
                "config's accelerators per worker, and no config may widen or move that",
            )
        if isinstance(item, dict) and isinstance(item.get("secret"), str) and len(item) == 1:
            if item["secret"] != key:
                raise field_error(
                    str(key),
                    f"an environment secret is read from the runner host's variable of the "
                    f"same name: write {{secret: {key}}} (got {{secret: {item['secret']}}})",
                )
            item = {"secret": True}
        out[key] = item
    return out


SecretEnv = Annotated[dict[EnvName, EnvValue], BeforeValidator(_secret_env)]


class SecretArg(Strict):
    """A secret as a command argument, ``{secret: NAME}`` (or the long form ``{secret: true,
    name: NAME}``): the runner host puts the value of its environment variable NAME there;
    the config, the approval and every page hold only the name."""

    model_config = ConfigDict(
        extra="forbid",
        validate_default=True,
        strict=True,
        json_schema_extra=lambda schema: _secret_name_schema(schema, argument=True),
    )

    secret: Literal[True] = Field(description="Always true: the value is not in the config.")
    name: EnvName = Field(description="Environment variable on the runner host.")

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        if isinstance(value, dict) and isinstance(value.get("secret"), str) and len(value) == 1:
            return {"secret": True, "name": value["secret"]}
        return value


ArgText = Annotated[str, StringConstraints(min_length=1, max_length=4000)]
