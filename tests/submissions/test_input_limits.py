"""Input limits before parsing (issue 17 findings 5 and 8; docs/security.md "Input limits").

Every hostile body is a 400 in the one error shape, naming the field or header, with
nothing stored; none may reach the recursive parsers or the database as a 5xx.
"""

from __future__ import annotations

import json

import pytest

from agentperf.schema.limits import MAX_DEPTH
from submissions.models import Submission
from tests.submissions.configs import as_json, as_yaml
from tests.submissions.support import make_catalog, token_client

pytestmark = pytest.mark.django_db

JSON = "application/json"
YAML = "application/yaml"
DEEP = 50_000


@pytest.fixture
def alice(cast):
    return token_client(cast.org_a)


@pytest.fixture
def catalog():
    return make_catalog()


def submit(client, body, content_type=YAML, **headers):
    return client.post("/api/v1/submissions/", body, content_type=content_type, **headers)


def refused(response, field: str, code: str | None = None) -> dict:
    """Assert a 400 in the error shape that names `field`; returns the error."""
    assert response.status_code == 400, response.content[:500]
    error = response.json()["error"]
    assert field in error["fields"], error
    assert error["fields"][field] and all(isinstance(m, str) for m in error["fields"][field])
    if code is not None:
        assert error["code"] == code
    assert not Submission.objects.exists()
    return error


def test_a_50000_deep_json_list_is_refused_naming_the_field(alice, catalog):
    doc = catalog.config()
    doc.pop("notes")
    body = as_json(doc)[:-1] + ', "notes": ' + "[" * DEEP + "]" * DEEP + "}"
    error = refused(submit(alice, body, JSON), "notes", "too_deep")
    assert str(MAX_DEPTH) in error["message"]


def test_a_50000_deep_yaml_flow_list_is_refused_naming_the_field(alice, catalog):
    body = as_yaml(catalog.config(notes="x")).replace(
        "notes: x", "notes: " + "[" * DEEP + "]" * DEEP
    )
    refused(submit(alice, body), "notes", "too_deep")


def test_a_deep_yaml_block_list_is_refused_naming_the_field(alice, catalog):
    lines = ["notes:"] + [("  " * i) + "-" for i in range(1, MAX_DEPTH + 3)]
    body = as_yaml(catalog.config()).replace("notes:", "old_notes:", 1) + "\n".join(lines)
    refused(submit(alice, body), "notes", "too_deep")


def test_a_deep_sniffed_body_is_refused(alice):
    refused(submit(alice, "a: " + "[" * DEEP, "text/plain"), "a", "too_deep")


def test_nesting_at_the_limit_parses_and_is_judged_by_the_schema(alice, catalog):
    depth_left = MAX_DEPTH - 1  # the document itself is one level
    doc = catalog.config()
    doc.pop("notes")
    body = as_json(doc)[:-1] + ', "notes": ' + "[" * depth_left
    body += "]" * depth_left + "}"
    error = refused(submit(alice, body, JSON), "notes", "invalid_config")
    assert error["fields"]["notes"] == ["Input should be a valid string"]


@pytest.mark.parametrize("token", ["Infinity", "-Infinity", "NaN", "1e400"])
def test_non_finite_json_numbers_are_refused_naming_the_field(alice, catalog, token):
    doc = catalog.config(kv_cache={"offload": "cpu", "offload_gb": 1.5})
    body = as_json(doc).replace("1.5", token)
    assert token in body
    refused(submit(alice, body, JSON), "kv_cache.offload_gb", "invalid_config")


@pytest.mark.parametrize("token", [".inf", "-.inf", ".nan", ".NaN", "1.0e+400"])
def test_non_finite_yaml_numbers_are_refused_naming_the_field(alice, catalog, token):
    body = as_yaml(catalog.config(kv_cache={"offload": "cpu", "offload_gb": 1.5}))
    body = body.replace("1.5", token)
    refused(submit(alice, body), "kv_cache.offload_gb", "invalid_config")


@pytest.mark.parametrize("value", [True, False, "2", 2.0])
def test_a_non_integer_where_an_integer_is_meant_is_refused(alice, catalog, value):
    doc = catalog.config()
    doc["topology"]["roles"][0]["workers"] = value
    refused(submit(alice, json.dumps(doc), JSON), "topology.roles.0.workers", "invalid_config")


def test_an_integer_where_a_boolean_is_meant_is_refused(alice, catalog):
    doc = catalog.config(kv_cache={"prefix_caching": 1})
    refused(submit(alice, json.dumps(doc), JSON), "kv_cache.prefix_caching", "invalid_config")


def test_a_json_date_string_is_still_a_date(alice, catalog):
    doc = catalog.config(availability={"status": "preview", "date": "2027-01-31"})
    response = submit(alice, json.dumps(doc), JSON)
    assert response.status_code == 201, response.content
    assert response.json()["config"]["availability"]["date"] == "2027-01-31"


def test_a_date_that_is_a_number_is_refused(alice, catalog):
    doc = catalog.config(availability={"status": "preview", "date": 1767225600})
    refused(submit(alice, json.dumps(doc), JSON), "availability.date", "invalid_config")


@pytest.mark.parametrize("char", ["\x00", "\x1b", "\x7f", "\x85", "\u2028"])
def test_a_control_character_in_notes_is_refused_in_json(alice, catalog, char):
    body = json.dumps(catalog.config(notes=f"before{char}after"))
    refused(submit(alice, body, JSON), "notes", "invalid_config")


def test_a_lone_surrogate_escape_is_refused_naming_the_field(alice, catalog):
    body = json.dumps(catalog.config(notes="x")).replace('"x"', '"\\ud800"')
    assert "\\ud800" in body
    refused(submit(alice, body, JSON), "notes", "invalid_config")


def test_a_nul_escape_in_a_yaml_string_is_refused(alice, catalog):
    body = as_yaml(catalog.config(notes="x")).replace("notes: x", 'notes: "a\\0b"')
    refused(submit(alice, body), "notes", "invalid_config")


def test_a_control_character_in_a_nested_string_names_its_path(alice, catalog):
    doc = catalog.config()
    doc["engine"]["version"] = "0.5\x00"
    refused(submit(alice, json.dumps(doc), JSON), "engine.version", "invalid_config")


def test_a_control_character_in_a_key_is_refused(alice, catalog):
    doc = catalog.config()
    doc["engine"]["ver\x00sion"] = "1"
    error = refused(submit(alice, json.dumps(doc), JSON), "engine", "invalid_config")
    assert "\x00" not in json.dumps(error)


def test_newlines_and_tabs_in_notes_are_kept(alice, catalog):
    response = submit(alice, json.dumps(catalog.config(notes="line one\n\tline two\r\n")), JSON)
    assert response.status_code == 201, response.content
    assert response.json()["config"]["notes"] == "line one\n\tline two\r\n"


def test_an_over_long_idempotency_key_is_refused_naming_the_header(alice, catalog):
    response = submit(alice, catalog.yaml(), HTTP_IDEMPOTENCY_KEY="k" * 300)
    refused(response, "Idempotency-Key", "invalid_header")


def test_an_idempotency_key_of_200_characters_is_accepted(alice, catalog):
    response = submit(alice, catalog.yaml(), HTTP_IDEMPOTENCY_KEY="k" * 200)
    assert response.status_code == 201, response.content


def test_an_idempotency_key_with_a_control_character_is_refused(alice, catalog):
    response = submit(alice, catalog.yaml(), HTTP_IDEMPOTENCY_KEY="abc\x01def")
    refused(response, "Idempotency-Key", "invalid_header")


def test_the_resubmit_endpoint_applies_the_same_limits(alice, catalog):
    first = submit(alice, catalog.yaml()).json()["id"]
    url = f"/api/v1/submissions/{first}/resubmit/"
    deep = alice.post(url, '{"notes": ' + "[" * DEEP + "}", content_type=JSON)
    assert deep.status_code == 400 and "notes" in deep.json()["error"]["fields"]
    key = alice.post(url, catalog.yaml(), content_type=YAML, HTTP_IDEMPOTENCY_KEY="k" * 201)
    assert key.status_code == 400 and "Idempotency-Key" in key.json()["error"]["fields"]
    assert Submission.objects.count() == 1


# --- every other JSON body (DRF's parser) ----------------------------------------------


def test_a_deep_json_body_on_another_endpoint_is_a_400_naming_the_field(alice, catalog):
    sub = submit(alice, catalog.yaml()).json()["id"]
    body = '{"reason": ' + "[" * DEEP + "]" * DEEP + "}"
    response = alice.post(f"/api/v1/submissions/{sub}/withdraw/", body, content_type=JSON)
    assert response.status_code == 400, response.content[:300]
    error = response.json()["error"]
    assert error["code"] == "too_deep" and "reason" in error["fields"]
    assert Submission.objects.get(pk=sub).status != "withdrawn"


@pytest.mark.parametrize("token", ["Infinity", "NaN", "1e999"])
def test_a_non_finite_number_on_another_endpoint_is_a_400_naming_the_field(alice, catalog, token):
    sub = submit(alice, catalog.yaml()).json()["id"]
    body = '{"name": "a.txt", "size": ' + token + ', "sha256": "' + "0" * 64 + '"}'
    response = alice.post(f"/api/v1/submissions/{sub}/attachments/", body, content_type=JSON)
    assert response.status_code == 400, response.content[:300]
    assert "size" in response.json()["error"]["fields"]


def test_a_control_character_on_another_endpoint_is_a_400_naming_the_field(alice, catalog):
    sub = submit(alice, catalog.yaml()).json()["id"]
    body = json.dumps({"reason": "bye\x1b[31m"})
    response = alice.post(f"/api/v1/submissions/{sub}/withdraw/", body, content_type=JSON)
    assert response.status_code == 400, response.content[:300]
    assert "reason" in response.json()["error"]["fields"]


def test_true_where_the_literal_1_is_meant_is_refused(alice, catalog):
    doc = catalog.config(schema_version=True)
    refused(submit(alice, json.dumps(doc), JSON), "schema_version", "invalid_config")


def test_1_where_the_literal_true_is_meant_is_refused(alice, catalog):
    doc = catalog.config(env={"HF_TOKEN": {"secret": 1}})
    refused(submit(alice, json.dumps(doc), JSON), "env.HF_TOKEN.SecretRef.secret")
