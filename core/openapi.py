"""The OpenAPI schema declares the error statuses the API really returns (docs/security.md
"Input limits"; checked by tests/foundation/test_openapi_fuzz.py).

Each operation gets, besides what its view declares, the errors that follow from how the
view is configured: 400 always (any URL may carry a refused control character; bodies,
query and path parameters are checked too), 401 when it
authenticates, 403 when a permission can refuse, 404 when its path names an object, 413
and 415 for bodies, 429 when throttled. Each in the one error shape (`Error`).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers
from rest_framework.permissions import AllowAny

BODY_METHODS = ("POST", "PUT", "PATCH")


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="Dotted field path (or header name) to the messages about it.",
    )


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()

    class Meta:
        ref_name = "Error"


class AutoSchema(SpectacularAutoSchema):
    """drf-spectacular's AutoSchema plus the error responses a view's configuration implies."""

    def _error_statuses(self) -> dict[str, str]:
        view = self.view
        method = self.method.upper()
        has_body = method in BODY_METHODS and bool(getattr(view, "parser_classes", None))
        query = any(
            isinstance(p, OpenApiParameter) and p.location == OpenApiParameter.QUERY
            for p in self.get_override_parameters()
        )
        out: dict[str, str] = {}
        # any URL may carry a refused control character (core.middleware)
        out["400"] = (
            "invalid input; `error.fields` names each field path, query parameter or header"
            if has_body or query or method in BODY_METHODS or "{" in self.path
            else "a control character in the URL"
        )
        if getattr(view, "authentication_classes", None):
            out["401"] = "invalid credentials (or none where they are required)"
        if any(not issubclass(p, AllowAny) for p in getattr(view, "permission_classes", [])):
            out["403"] = "not allowed for these credentials"
        if "{" in self.path:
            out["404"] = "no such object (or not one these credentials may see)"
        if has_body:
            out["413"] = "body larger than the limit"
            out["415"] = "unsupported content type"
        if getattr(view, "throttle_classes", None):
            out["429"] = "throttled; retry after the Retry-After header's seconds"
        return out

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        for code, description in self._error_statuses().items():
            if code not in responses:
                responses[code] = self._get_response_for_code(
                    OpenApiResponse(ErrorSerializer, description=description),
                    code,
                    direction=direction,
                )
        return responses


class RunTokenScheme(OpenApiAuthenticationExtension):
    target_class = "runs.api.RunTokenAuthentication"
    name = "runToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "aprun_<secret>",
            "description": "The token minted for one run (in its run spec); opens that run only.",
        }
