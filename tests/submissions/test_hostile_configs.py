"""Hostile configs never yield a 5xx (issue 17 finding 5; docs/security.md "Input limits").

Configs are generated from the published JSON Schema (docs/deployment-config.schema.json)
and from a valid config, then mutated the way a hostile
vendor would (type swaps, deep nesting, non-finite numbers, control characters, huge
strings) and posted to the vendor API as JSON or YAML. Every answer is a 201 or a 4xx in
the error shape naming a field; a refused body stores nothing. Deterministic
(`derandomize=True`) and bounded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from portal.api.access import VendorSubmitThrottle, VendorThrottle
from submissions.models import Submission
from tests.submissions.support import make_catalog, token_client

pytestmark = pytest.mark.django_db

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "deployment-config.schema.json"


def schema_configs() -> st.SearchStrategy[Any]:
    """Documents the published config schema describes.

    Schemathesis's JSON Schema generator draws them: the schema is wrapped as the JSON body
    of one OpenAPI operation (its `$defs` as components). hypothesis-jsonschema 0.23.1, the
    latest release, fails on this schema with the pinned hypothesis (`cu.many` changed)."""
    text = SCHEMA_PATH.read_text().replace('"#/$defs/', '"#/components/schemas/')
    body = json.loads(text)
    components = body.pop("$defs")
    for key in ("$schema", "$id"):
        body.pop(key, None)
    content = {"application/json": {"schema": body}}
    document = {
        "openapi": "3.1.0",
        "info": {"title": "deployment config", "version": "1"},
        "paths": {
            "/config": {
                "post": {
                    "requestBody": {"required": True, "content": content},
                    "responses": {"201": {"description": "accepted"}},
                }
            }
        },
        "components": {"schemas": components},
    }
    operation = schemathesis.openapi.from_dict(document)["/config"]["POST"]
    return operation.as_strategy().map(lambda case: case.body)


EXAMPLES = 150
CONTROL = ["\x00", "\x01", "\x1b", "\x7f", "\x9b", "\u2028", "\u202e", "\ud800"]
SWAPS: list[Any] = [True, False, "2", 2.0, 0, -1, None, [], {}, "", 10**30]
OUTCOMES: dict[str, int] = {}


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            out += _paths(value, (*prefix, index))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _set(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    _get(doc, path[:-1])[path[-1]] = value
    return doc


DEEP = "agentperf-deep-sentinel"


@st.composite
def hostile(draw, base: dict) -> tuple[str, str]:
    """(body, content type) of a config, maybe mutated."""
    doc = draw(st.one_of(st.just(json.loads(json.dumps(base))), schema_configs()))
    depth = 0
    for _ in range(draw(st.integers(0, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths[1:] if len(paths) > 1 else paths))
        kind = draw(st.sampled_from(["swap", "deep", "nonfinite", "control", "huge"]))
        if kind == "swap":
            doc = _set(doc, path, draw(st.sampled_from(SWAPS)))
        elif kind == "deep":
            # spliced into the text below: the encoders recurse as the readers do
            doc = _set(doc, path, DEEP)
            depth = draw(st.sampled_from([65, 100, 50_000]))
            break
        elif kind == "nonfinite":
            doc = _set(doc, path, draw(st.sampled_from([math.inf, -math.inf, math.nan, 1e308])))
        elif kind == "control":
            text = str(_get(doc, path))
            at = draw(st.integers(0, len(text)))
            doc = _set(doc, path, text[:at] + draw(st.sampled_from(CONTROL)) + text[at:])
        else:
            doc = _set(doc, path, "x" * draw(st.sampled_from([5001, 300_000])))
    if draw(st.booleans()):
        body, content_type = json.dumps(doc, allow_nan=True), "application/json"
    else:
        body, content_type = yaml.safe_dump(doc, allow_unicode=False), "application/yaml"
    nested = "[" * depth + "]" * depth
    return body.replace(f'"{DEEP}"', nested).replace(DEEP, nested), content_type


@pytest.fixture
def vendor(cast, monkeypatch):
    monkeypatch.setattr(VendorSubmitThrottle, "THROTTLE_RATES", {"vendor_submit": "99999/hour"})
    monkeypatch.setattr(VendorThrottle, "THROTTLE_RATES", {"vendor": "99999/hour"})
    return token_client(cast.org_a), make_catalog()


def test_generated_and_mutated_configs_never_get_a_server_error(vendor):
    client, catalog = vendor
    OUTCOMES.clear()

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(case=hostile(catalog.config()))
    def post(case: tuple[str, str]) -> None:
        body, content_type = case
        before = Submission.objects.count()
        response = client.post("/api/v1/submissions/", body, content_type=content_type)
        code = response.status_code
        assert code < 500, (code, body[:300])
        if code == 201:
            OUTCOMES["201"] = OUTCOMES.get("201", 0) + 1
            return
        assert code in (400, 413), (code, response.content[:300])
        error = response.json()["error"]
        assert error["code"] and error["message"] and error["fields"], error
        assert all(messages for messages in error["fields"].values()), error
        assert Submission.objects.count() == before
        OUTCOMES[str(code)] = OUTCOMES.get(str(code), 0) + 1
        if error["code"] == "too_deep":
            OUTCOMES["too_deep"] = OUTCOMES.get("too_deep", 0) + 1

    post()
    print("hostile config outcomes:", dict(sorted(OUTCOMES.items())))
    # the run exercised acceptance, refusal by field and the depth limit
    assert OUTCOMES.get("201", 0) > 0 and OUTCOMES.get("400", 0) > 0
    assert OUTCOMES.get("too_deep", 0) > 0
