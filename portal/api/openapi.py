"""drf-spectacular description of the vendor token authentication."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "submissions.auth.ApiTokenAuthentication"
    name = "vendorToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "apf_<prefix>_<secret>",
            "description": "Vendor API token from `manage.py create_token --org NAME`.",
        }


# --- the deployment-config schema in the OpenAPI document ---------------------------------

CONFIG_COMPONENT = "DeploymentConfig"
CONFIG_REF = {"$ref": f"#/components/schemas/{CONFIG_COMPONENT}"}


def _component_name(def_name: str) -> str:
    return f"{CONFIG_COMPONENT}{def_name}"


def to_oas30(node):
    """A JSON Schema (2020-12: pydantic's, the ladder body's) in OpenAPI 3.0's dialect:
    refs into components, `{"type": "null"}` branches as `nullable`, `const` as a one-value
    `enum`, numeric `exclusiveMinimum` / `exclusiveMaximum` as `minimum` / `maximum` plus
    `exclusiveMinimum: true` / `exclusiveMaximum: true`, `patternProperties` as
    `additionalProperties` (the pattern itself is kept in the description; the strict
    schemas at /api/v1/schema/*.json are authoritative)."""
    if isinstance(node, list):
        return [to_oas30(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in ("$schema", "$id", "$defs", "propertyNames"):
            continue
        if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
            out[key] = "#/components/schemas/" + _component_name(value.removeprefix("#/$defs/"))
        elif key == "properties":
            out[key] = {name: to_oas30(v) for name, v in value.items()}
        elif key == "const":
            out["enum"] = [value]
        elif key == "exclusiveMinimum" and not isinstance(value, bool):
            out["minimum"], out["exclusiveMinimum"] = value, True
        elif key == "exclusiveMaximum" and not isinstance(value, bool):
            out["maximum"], out["exclusiveMaximum"] = value, True
        elif key == "patternProperties":
            [(pattern, schema)] = list(value.items())[:1]
            out["additionalProperties"] = to_oas30(schema)
            out["description"] = (node.get("description", "") + f" Keys match {pattern}.").strip()
        else:
            out[key] = to_oas30(value)
    branches = out.get("anyOf")
    if isinstance(branches, list) and {"type": "null"} in branches:
        rest = [b for b in branches if b != {"type": "null"}]
        del out["anyOf"]
        if len(rest) == 1 and "$ref" in rest[0]:
            out["allOf"] = rest
        elif len(rest) == 1:
            out.update(rest[0])
        else:
            out["anyOf"] = rest
        out["nullable"] = True
    return out


def deployment_config_components(result, generator, request, public):
    """POSTPROCESSING_HOOKS entry: add the deployment-config schema (and its definitions)
    as components, so request bodies can reference `#/components/schemas/DeploymentConfig`."""
    from submissions.schema import config_json_schema

    schema = config_json_schema()
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for name, definition in (schema.get("$defs") or {}).items():
        schemas[_component_name(name)] = to_oas30(definition)
    schemas[CONFIG_COMPONENT] = to_oas30(schema)
    return result
