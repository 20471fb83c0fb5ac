"""JSON Schema of a ladder submission (docs/ladders.md), served at
/api/v1/schema/ladder.json; ``baseline.config`` is a deployment config (its own schema at
/api/v1/schema/deployment-config.json) and each rung's patch a JSON Merge Patch of one."""

from __future__ import annotations

from typing import Any

from ladders.services import MAX_RUNGS
from runner.ladder.attribution import ORDERS


def ladder_json_schema() -> dict[str, Any]:
    config_ref = {
        "type": "object",
        "description": "a deployment config: /api/v1/schema/deployment-config.json",
    }
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
            },  # fmt: skip
            "rungs": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_RUNGS,
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name", "description", "patch"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1, "maxLength": 200},
                        "description": {"type": "string", "minLength": 1, "maxLength": 500},
                        "patch": {
                            "type": "object",
                            "minProperties": 1,
                            "description": "JSON Merge Patch (RFC 7396) of the deployment "
                            "config; may not touch benchmark, topology.roles or model.id",
                        },
                    },
                },
            },
            "orders": {
                "type": "array",
                "items": {"enum": list(ORDERS)},
                "description": "starts with forward",
            },
            "speeds": {
                "type": "array",
                "items": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 100000},
            },
        },
    }
