"""The ladder API in the OpenAPI document (docs/api.md "Ladders", ladders/openapi.py): the
body is the ladder JSON Schema as a component (its baseline config the DeploymentConfig
component), the responses are described and match what the views answer, and every 4xx
is the one error shape. The fuzz run over the whole document is
tests/foundation/test_openapi_fuzz.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.urls import include, path
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator

from demo.synthetic import make_org
from ladders.openapi import LadderDetailOut, LadderOut, LadderRungOut
from ladders.schema import ladder_json_schema
from ladders.services import ladder_import
from tests.ladders.test_ladders import body, post
from tests.submissions.support import make_catalog, token_client

ROOT = Path(__file__).resolve().parents[2]
ERROR = {"$ref": "#/components/schemas/Error"}


def _json_schema(response: dict) -> dict:
    return response["content"]["application/json"]["schema"]


def test_the_ladder_endpoints_are_in_the_openapi_document_without_warnings() -> None:
    GENERATOR_STATS.reset()
    SchemaGenerator(patterns=[path("", include("ladders.urls"))]).get_schema(
        request=None, public=True
    )
    assert not GENERATOR_STATS._warn_cache, list(GENERATOR_STATS._warn_cache)
    assert not GENERATOR_STATS._error_cache, list(GENERATOR_STATS._error_cache)

    schema = SchemaGenerator().get_schema(request=None, public=True)
    paths, components = schema["paths"], schema["components"]["schemas"]
    create = paths["/api/v1/ladders/"]["post"]
    assert create["operationId"] == "ladders_create"
    assert list(create["requestBody"]["content"]) == ["application/json"]
    assert _json_schema(create["requestBody"]) == {"$ref": "#/components/schemas/LadderBody"}
    assert _json_schema(create["responses"]["201"]) == {
        "$ref": "#/components/schemas/LadderDetailOut"
    }
    assert "rungs.1.patch.speculative.draft_tokens" in create["responses"]["400"]["description"]
    for code in ("400", "401", "403", "413", "415", "429"):
        assert _json_schema(create["responses"][code]) == ERROR, code

    ladder_body = components["LadderBody"]
    assert ladder_body["required"] == ["name", "baseline", "rungs"]
    config = ladder_body["properties"]["baseline"]["oneOf"][0]["properties"]["config"]
    assert config["oneOf"][0] == {"$ref": "#/components/schemas/DeploymentConfig"}
    assert "$schema" not in ladder_body
    speed = ladder_body["properties"]["speeds"]["items"]  # OpenAPI 3.0's exclusive bounds
    assert speed["exclusiveMinimum"] is True and speed["maximum"] == 100000
    # the served schema is the same document with a plain object for the config
    served = ladder_json_schema()
    assert set(served["properties"]) == set(ladder_body["properties"])

    expected = {
        ("/api/v1/ladders/", "get"): ("ladders_list", "LadderListOut"),
        ("/api/v1/ladders/{id}/", "get"): ("ladders_retrieve", "LadderDetailOut"),
        ("/api/v1/public/ladders/", "get"): ("public_ladders_list", "LadderListOut"),
        ("/api/v1/public/ladders/{id}/", "get"): ("public_ladders_retrieve", "LadderOut"),
    }
    for (route, method), (operation_id, component) in expected.items():
        op = paths[route][method]
        assert op["operationId"] == operation_id
        assert _json_schema(op["responses"]["200"]) == {"$ref": f"#/components/schemas/{component}"}
        assert _json_schema(op["responses"]["400"]) == ERROR
        if "{id}" in route:
            assert _json_schema(op["responses"]["404"]) == ERROR
    public = paths["/api/v1/public/ladders/{id}/"]["get"]
    assert [p["name"] for p in public["parameters"] if p["in"] == "query"] == ["speed"]
    assert paths["/api/v1/schema/ladder.json"]["get"]["operationId"] == "ladder_schema"
    assert components["LadderOut"]["properties"]["status"] == {
        "$ref": "#/components/schemas/LadderStatusEnum"
    }


@pytest.mark.django_db
def test_the_answers_have_the_documented_fields(client) -> None:
    cat = make_catalog()
    org = make_org()
    api = token_client(org)
    created = post(api, body(cat))
    assert created.status_code == 201, created.content
    fields = set(LadderDetailOut().fields)
    assert set(created.json()) == fields
    assert set(created.json()["rungs"][0]) == set(LadderRungOut().fields)
    ladder_id = created.json()["id"]
    assert set(api.get(f"/api/v1/ladders/{ladder_id}/").json()) == fields
    listed = api.get("/api/v1/ladders/").json()["results"]
    assert [set(x) for x in listed] == [set(LadderOut().fields)]

    doc = json.loads((ROOT / "docs/examples/ladder-gb300.json").read_text())
    published = ladder_import(org=org, doc=doc, model=cat.model, hardware=cat.hardware)
    assert set(client.get(f"/api/v1/public/ladders/{published.pk}/").json()) == set(
        LadderOut().fields
    )
    assert [set(x) for x in client.get("/api/v1/public/ladders/").json()["results"]] == [
        set(LadderOut().fields)
    ]


@pytest.mark.django_db
def test_a_form_or_yaml_body_is_a_415_in_the_error_shape() -> None:
    api = token_client(make_org())
    response = api.post("/api/v1/ladders/", "name: x", content_type="application/yaml")
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"
    response = api.post("/api/v1/ladders/", {"name": "x"}, format="multipart")
    assert response.status_code == 415


def test_the_committed_ladder_schema_is_the_one_generated_from_the_model() -> None:
    from ladders.schema import DEFAULT_PATH, render

    assert DEFAULT_PATH == ROOT / "docs/ladder.schema.json"
    assert DEFAULT_PATH.read_text() == render(), (
        'regenerate: python manage.py shell -c "import ladders.schema as s; s.main([])"'
    )
