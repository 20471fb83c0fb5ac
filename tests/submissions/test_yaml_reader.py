"""The one YAML reader (issue 24 findings 2 and 3; docs/security.md "YAML").

YAML 1.2 core schema, no anchors, aliases, tags, complex or duplicate keys (each refused
with its line), no undeclared Content-Type; the same reader behind the vendor API's submit
and resubmit, the portal's form and its annotator, ladders and `agentperf validate`.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.test import Client

from agentperf.schema.yaml12 import load_yaml
from submissions.models import Submission
from submissions.services.submissions import submission_create
from tests.submissions.support import make_catalog, token_client

pytestmark = pytest.mark.django_db

YAML = "application/yaml"
COMPLEX_KEY = "? [a, b]\n: x\n"


@pytest.fixture
def catalog():
    return make_catalog()


@pytest.fixture
def alice(cast):
    return token_client(cast.org_a)


def portal(user) -> Client:
    client = Client()
    assert client.login(username=user.username, password=f"{user.username}-password-123")
    return client


# --- the reader ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("yes", "yes"),
        ("No", "No"),
        ("on", "on"),
        ("y", "y"),
        ("0x1", 1),  # 1.2 core reads hexadecimal and 0o octal as integers
        ("0o17", 15),
        ("010", 10),  # 1.1 read 8
        ("2_56", "2_56"),  # 1.1 read 256
        ("0b101", "0b101"),  # 1.1 read 5
        ("1:30", "1:30"),  # 1.1 read 90
        ("2027-01-31", "2027-01-31"),  # 1.1 read a date; the schema reads ISO text
        ("1e3", 1000.0),  # 1.1 (as PyYAML reads it) gave the string "1e3"
        ("true", True),
        ("TRUE", True),
        ("tRue", "tRue"),
        ("~", None),
        ("", None),
        ("'yes'", "yes"),
    ],
)
def test_plain_scalars_are_read_by_the_yaml_1_2_core_schema(text, value):
    assert load_yaml(f"a: {text}\n") == {"a": value}


def test_a_merge_key_is_an_ordinary_key():
    assert load_yaml("<<: {b: 1}\n") == {"<<": {"b": 1}}


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (COMPLEX_KEY, 1, "complex keys"),
        ("a: 1\nb:\n  ? {c: 1}\n  : x\n", 3, "complex keys"),
        ("a: 1\n[x]: 2\n", 2, "complex keys"),
        ("a: 1\nb: &anchor 2\n", 2, "anchors and aliases"),  # an anchor with no alias
        ("a: &x [1]\nb: *x\n", 1, "anchors and aliases"),
        ("a: 1\nb: !!str 2\n", 2, "tags are not accepted"),
        ("a: !!binary aGk=\n", 1, "tags are not accepted"),
        ("a: 1\nb: 2\na: 3\n", 3, "duplicate key 'a'"),
        ("a:\n  1: x\n  1.0: y\n", 3, "duplicate key"),
    ],
)
def test_refusals_name_their_line(text, line, words):
    import yaml

    with pytest.raises(yaml.MarkedYAMLError) as info:
        load_yaml(text)
    message = " ".join(str(info.value).split())
    assert words in message and f"line {line}," in message, message


# --- the API ------------------------------------------------------------------------------


def test_a_complex_key_on_submit_and_resubmit_is_a_400_with_its_line(alice, catalog, cast):
    body = catalog.yaml() + COMPLEX_KEY
    line = body.count("\n") - 1
    response = alice.post("/api/v1/submissions/", body, content_type=YAML)
    assert response.status_code == 400, response.content[:300]
    error = response.json()["error"]
    assert error["code"] == "unparseable"
    assert f"line {line}," in error["fields"]["non_field_errors"][0]
    assert not Submission.objects.exists()

    first = submission_create(org=cast.org_a, config_text=catalog.yaml(), created_by=cast.alice)
    again = alice.post(f"/api/v1/submissions/{first.pk}/resubmit/", body, content_type=YAML)
    assert again.status_code == 400, again.content[:300]
    assert "complex keys" in again.json()["error"]["fields"]["non_field_errors"][0]
    assert Submission.objects.count() == 1


@pytest.mark.parametrize("value", ["yes", "on"])
def test_yes_where_a_boolean_is_meant_is_refused_not_coerced(alice, catalog, value):
    body = catalog.yaml().replace("prefix_caching: true", f"prefix_caching: {value}")
    assert f"prefix_caching: {value}" in body
    response = alice.post("/api/v1/submissions/", body, content_type=YAML)
    assert response.status_code == 400, response.content[:300]
    assert "kv_cache.prefix_caching" in response.json()["error"]["fields"]


def test_an_underscored_number_is_refused_not_read_as_256(alice, catalog):
    body = catalog.yaml().replace("max_concurrency: 256", "max_concurrency: 2_56")
    assert "max_concurrency: 2_56" in body
    response = alice.post("/api/v1/submissions/", body, content_type=YAML)
    assert response.status_code == 400, response.content[:300]
    assert "benchmark.max_concurrency" in response.json()["error"]["fields"]


def test_a_hexadecimal_integer_is_read_as_yaml_1_2_reads_it(alice, catalog):
    body = catalog.yaml().replace("max_concurrency: 256", "max_concurrency: 0x100")
    response = alice.post("/api/v1/submissions/", body, content_type=YAML)
    assert response.status_code == 201, response.content[:300]
    assert response.json()["config"]["benchmark"]["max_concurrency"] == 256


@pytest.mark.parametrize("content_type", [None, "application/octet-stream"])
def test_a_body_without_a_declared_type_is_a_415(alice, catalog, content_type):
    # the test client's default type is application/octet-stream; "" sends none at all
    body = catalog.yaml().encode()
    response = alice.generic("POST", "/api/v1/submissions/", body, content_type=content_type or "")
    assert response.wsgi_request.META["CONTENT_TYPE"] == (content_type or "")
    assert response.status_code == 415, response.content[:300]
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert not Submission.objects.exists()


# --- the portal ---------------------------------------------------------------------------


def test_the_portal_refuses_a_complex_key_beside_its_line(cast, catalog):
    client = portal(cast.alice)
    body = catalog.yaml() + COMPLEX_KEY
    page = client.post("/portal/submit/", {"config_text": body})
    assert page.status_code == 400
    assert b"complex keys" in page.content
    assert not Submission.objects.exists()


def test_the_portal_refuses_5000_deep_nesting_with_a_400(cast, catalog):
    client = portal(cast.alice)
    body = catalog.yaml() + "deep: " + "[" * 5000 + "]" * 5000 + "\n"
    page = client.post("/portal/submit/", {"config_text": body})
    assert page.status_code == 400
    assert b"nests more than" in page.content
    assert not Submission.objects.exists()


def test_the_portal_reads_pasted_text_as_yaml_1_2(cast, catalog):
    client = portal(cast.alice)
    body = catalog.yaml().replace("prefix_caching: true", "prefix_caching: yes")
    page = client.post("/portal/submit/", {"config_text": body})
    assert page.status_code == 400
    assert b"kv_cache.prefix_caching" in page.content
    assert not Submission.objects.exists()


# --- the CLI's offline validate --------------------------------------------------------------


def test_agentperf_validate_refuses_a_complex_key_with_its_line(tmp_path, catalog):
    config = tmp_path / "complex.yaml"
    config.write_text(catalog.yaml() + COMPLEX_KEY)
    done = subprocess.run(
        [sys.executable, "-m", "agentperf_cli", "validate", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "AGENTPERF_CONFIG": str(tmp_path / "cli.json")},
    )
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    assert "complex keys" in done.stderr and "line" in done.stderr
