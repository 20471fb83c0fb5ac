"""JSON Schema of a ladder submission (docs/ladders.md), served at
/api/v1/schema/ladder.json; ``baseline.config`` is a deployment config (its own schema at
/api/v1/schema/deployment-config.json) and each rung's patch a JSON Merge Patch of one."""

from __future__ import annotations

from typing import Any

from catalog.models import WORKLOADS
from ladders.services import MAX_RUNGS
from runner.ladder.attribution import ORDERS

CONFIG_OBJECT = {
    "type": "object",
    "description": "a deployment config: /api/v1/schema/deployment-config.json",
}


def ladder_json_schema(config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The body's schema; ``config`` is what ``baseline.config`` (as a mapping) refers to:
    a plain object here, the ``DeploymentConfig`` component in the OpenAPI document
    (ladders/openapi.py)."""
    config_ref = config or CONFIG_OBJECT
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Ladder",
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "baseline", "rungs"],
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 200},
            "description": {"type": "string", "maxLength": 500},
            "baseline": {
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["config"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string"},
                            "config": {"oneOf": [config_ref, {"type": "string"}]},
                        },
                    },
                    {
                        "type": "object",
                        "required": ["result"],
                        "additionalProperties": False,
                        "properties": {"name": {"type": "string"}, "result": {"type": "integer"}},
                    },
                ]
            },
            "rungs": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_RUNGS,
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name", "description"],
                    "anyOf": [{"required": ["patch"]}, {"required": ["workload"]}],
                    "properties": {
                        "name": {"type": "string", "minLength": 1, "maxLength": 200},
                        "description": {"type": "string", "minLength": 1, "maxLength": 500},
                        "patch": {
                            "type": "object",
                            "minProperties": 1,
                            "description": "JSON Merge Patch (RFC 7396) of the deployment "
                            "config; may not touch benchmark, topology.roles or model.id",
                        },
                        "workload": {
                            "type": "string",
                            "enum": list(WORKLOADS),
                            "description": "the workload replayed from this rung on "
                            '(docs/ladders.md "Workloads"); only agentic coding is ranked',
                        },
                    },
                },
            },
            "orders": {
                "type": "array",
                "items": {"type": "string", "enum": list(ORDERS)},
                "description": "starts with forward",
            },
            "speeds": {
                "type": "array",
                "items": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 100000},
            },
        },
    }
