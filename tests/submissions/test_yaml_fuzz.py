"""Drawn YAML documents never get a 5xx on any path that reads YAML (issue 24 finding 2;
docs/security.md "YAML").

Hypothesis draws YAML text: a valid config with a hostile fragment spliced in at a drawn
line (complex keys, anchors and aliases, tags, duplicate keys, YAML 1.1 scalars, deep flow
and block nesting, directives, several documents, control characters, huge numbers), or
a drawn tree dumped as YAML, or raw drawn characters. Each document goes to every reader:
the vendor API's submit and resubmit, the portal's submit form, the portal's ladder form,
the ladder API (a rung's baseline config as YAML text) and `agentperf validate`'s reader.
Every answer is below 500. Deterministic (`derandomize=True`) and bounded.
"""

from __future__ import annotations

import json

import pytest
import yaml
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentperf_cli.offline import validate_text
from portal.api.access import VendorSubmitThrottle, VendorThrottle
from submissions.services.submissions import submission_create
from tests.submissions.support import make_catalog, token_client

pytestmark = pytest.mark.django_db

EXAMPLES = 60
FRAGMENTS = [
    "? [a, b]\n: x",
    "? {a: 1}\n: x",
    "[a, b]: c",
    "{[x]: 1}: 2",
    "k: {? [1]: 2}",
    "a: &anchor 1",
    "a: &x [1, 2]\nb: *x",
    "a: &a [*a]",
    "b: *nothing",
    "c: !!python/object/apply:os.system ['true']",
    "c: !!set {a, b}",
    "c: !!binary aGVsbG8=",
    "c: !!timestamp 2001-12-14",
    "c: !custom x",
    "<<: {notes: merged}",
    "notes: yes",
    "notes: 0x1",
    "notes: 2_56",
    "notes: 1:30",
    "notes: 0b101",
    "notes: .inf",
    "notes: 1e400",
    "notes: " + "9" * 5000,
    "notes: 0x" + "f" * 5000,
    "notes: a\nnotes: b",
    "%YAML 1.1\n---",
    "%TAG ! tag:example.com,2000:\n---",
    "---\nsecond: document",
    "...",
    "notes: \x00",
    "notes: \x1b[31m",
    "\ufeffnotes: bom",
    "notes: \t tab",
    "\t- bad indent",
    "deep: " + "[" * 5000 + "]" * 5000,
    "deep: " + "{a: " * 5000 + "1" + "}" * 5000,
    "deep: " + "[" * 5000,
    "".join(" " * i + "- \n" for i in range(0, 400, 2)),
    "".join(" " * i + f"k{i}:\n" for i in range(0, 400, 2)),
    "notes: '" + "x" * 300_000 + "'",
    ": no key",
    "- a list at the top",
    "just text",
    "",
]


def trees() -> st.SearchStrategy:
    scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20))
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(st.text(max_size=8), children, max_size=4),
        ),
        max_leaves=20,
    )


@st.composite
def documents(draw, base: str) -> str:
    kind = draw(st.sampled_from(["valid", "splice", "splice", "splice", "tree", "raw"]))
    if kind == "valid":  # the config as it is: acceptance stays reachable
        return base
    if kind == "tree":
        return yaml.safe_dump(draw(trees()), allow_unicode=True)
    if kind == "raw":
        alphabet = st.sampled_from(list("?:-[]{}&*!|>'\"#%@`, \n\tab01"))
        return draw(st.text(alphabet=alphabet, max_size=80))
    lines = base.splitlines()
    for _ in range(draw(st.integers(1, 2))):
        at = draw(st.integers(0, len(lines)))
        fragment = draw(st.sampled_from(FRAGMENTS))
        indent = " " * draw(st.sampled_from([0, 0, 2]))
        lines[at:at] = [indent + line for line in fragment.split("\n")]
    return "\n".join(lines) + "\n"


@pytest.fixture
def setup(cast, monkeypatch):
    monkeypatch.setattr(VendorSubmitThrottle, "THROTTLE_RATES", {"vendor_submit": "99999/hour"})
    monkeypatch.setattr(VendorThrottle, "THROTTLE_RATES", {"vendor": "99999/hour"})
    catalog = make_catalog()
    previous = submission_create(org=cast.org_a, config_text=catalog.yaml(), created_by=cast.alice)
    portal = Client()
    portal.force_login(cast.alice)
    return token_client(cast.org_a), portal, catalog, previous


def test_drawn_yaml_never_gets_a_server_error_on_any_reader(setup):
    api, portal, catalog, previous = setup
    outcomes: dict[str, int] = {}
    for c in (api, portal):
        c.raise_request_exception = False  # a 500 is counted, not raised

    def answered(where: str, code: int, text: str) -> None:
        assert code < 500, (where, code, text[:300])
        outcomes[f"{where} {code}"] = outcomes.get(f"{where} {code}", 0) + 1

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.function_scoped_fixture,
        ],
    )
    @given(text=documents(catalog.yaml()))
    def read_everywhere(text: str) -> None:
        yaml_type = "application/yaml"
        r = api.post("/api/v1/submissions/", text, content_type=yaml_type)
        answered("submit", r.status_code, text)
        r = api.post(f"/api/v1/submissions/{previous.pk}/resubmit/", text, content_type=yaml_type)
        answered("resubmit", r.status_code, text)
        r = portal.post("/portal/submit/", {"config_text": text})
        answered("portal", r.status_code, text)
        r = portal.post("/portal/ladders/new/", {"config_text": text})
        answered("portal-ladder", r.status_code, text)
        body = {
            "name": "fuzz",
            "baseline": {"config": text},
            "rungs": [{"name": "a", "description": "b", "patch": {"notes": "n"}}],
        }
        r = api.post("/api/v1/ladders/", json.dumps(body), content_type="application/json")
        answered("ladder-api", r.status_code, text)
        error, _ = validate_text(text.encode("utf-8", "surrogatepass"), yaml_type)
        outcomes["cli"] = outcomes.get("cli", 0) + 1
        if error is not None:
            assert error["error"]["fields"], error

    read_everywhere()
    print("drawn YAML outcomes:", dict(sorted(outcomes.items())))
    # the run reached acceptance and refusal on the API, and the portal's annotated refusal
    assert outcomes.get("submit 201", 0) > 0 and outcomes.get("submit 400", 0) > 0
    assert outcomes.get("portal 400", 0) > 0
