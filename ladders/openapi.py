"""The ladder API in the OpenAPI document (docs/api.md "Ladders", docs/ladders.md).

The request body is the ladder JSON Schema of ``ladders/schema.py`` (the one served at
/api/v1/schema/ladder.json) as the ``LadderBody`` component, with ``baseline.config``
referring to the ``DeploymentConfig`` component (portal/api/openapi.py), wired the way the
deployment config's schema is: a POSTPROCESSING_HOOKS entry (config/settings.py). The
responses are described by the serializers below; the views build them with
``ladders.views.ladder_json`` and ``_rungs_summary`` (tests/ladders/test_openapi.py checks
that the two agree). The 4xx answers are the one error shape (core/openapi.py).
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from agentperf.ladder.document import ORDERS
from ladders.models import Ladder
from portal.api.openapi import CONFIG_REF, to_oas30

BODY_COMPONENT = "LadderBody"
BODY_REF = {"$ref": f"#/components/schemas/{BODY_COMPONENT}"}


def ladder_components(result: dict[str, Any], generator: Any, request: Any, public: Any):
    """POSTPROCESSING_HOOKS entry: the ladder body's schema as a component."""
    from ladders.schema import ladder_json_schema

    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas[BODY_COMPONENT] = to_oas30(ladder_json_schema(config=CONFIG_REF))
    return result


class LadderRungOut(serializers.Serializer):
    order = serializers.ChoiceField(choices=list(ORDERS))
    index = serializers.IntegerField(help_text="0 is the baseline")
    name = serializers.CharField()
    description = serializers.CharField()
    submission = serializers.IntegerField(help_text="the submission whose run measures it")
    submission_status = serializers.CharField()
    reused = serializers.BooleanField(help_text="an earlier verified run of the same config")
    config_sha256 = serializers.CharField()


class LadderOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField()
    status = serializers.ChoiceField(choices=Ladder.STATUS_CHOICES)
    status_reason = serializers.CharField()
    source = serializers.ChoiceField(choices=Ladder.SOURCE_CHOICES)
    simulated = serializers.BooleanField()
    model = serializers.CharField(help_text="catalog slug")
    hardware = serializers.CharField(help_text="catalog slug")
    orders = serializers.ListField(child=serializers.CharField())
    url = serializers.CharField(help_text="the public page (once published)")
    published_at = serializers.DateTimeField(allow_null=True)
    attribution = serializers.JSONField(
        allow_null=True,
        help_text='the engine\'s ladder.json document (docs/engine.md "ladder"): null in '
        "lists and until every rung is verified",
    )


class LadderDetailOut(LadderOut):
    rungs = LadderRungOut(many=True)


class LadderListOut(serializers.Serializer):
    results = LadderOut(many=True)
