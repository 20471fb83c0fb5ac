"""A bounded schemathesis run over the OpenAPI schema (issue 17 finding 5; docs/security.md
"Input limits"): every operation, valid and invalid inputs, against the live server on
loopback (gunicorn, the production server), as a vendor with a real token. No answer is a 5xx, every status code is one the
schema declares, and every error body has the one error shape. Deterministic
(`derandomize=True`) and bounded (EXAMPLES_PER_OPERATION per operation and mode).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import content_type_conformance, status_code_conformance

from ladders.services import ladder_import
from submissions.services.tokens import api_token_create
from tests.submissions.support import make_catalog, token_client
from tests.support.builders import make_cast
from tests.support.webserver import start_gunicorn
from tests.support.workers import worker_env

EXAMPLES_PER_OPERATION = 6
LADDER_EXAMPLE = Path(__file__).resolve().parents[2] / "docs/examples/ladder-gb300.json"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance]


@pytest.fixture
def fuzz_target(transactional_db, tmp_path):
    """gunicorn (two workers) on loopback against the test database, its schema and a vendor
    token; throttles raised out of the way (they are tested on their own), so the run
    reaches the views."""
    cast = make_cast()
    catalog = make_catalog()
    _, token = api_token_create(org=cast.org_a, name="fuzz")
    submission = token_client(cast.org_a).post(
        "/api/v1/submissions/", catalog.yaml(), content_type="application/yaml"
    )
    assert submission.status_code == 201, submission.content
    # a ladder of the vendor's (docs/ladders.md) and a published one (an engine ladder)
    ladder = token_client(cast.org_a).post(
        "/api/v1/ladders/",
        {
            "name": "fuzz ladder",
            "baseline": {"config": catalog.config()},
            "rungs": [{"name": "new engine", "description": "d", "patch": {"notes": "n"}}],
        },
        format="json",
    )
    assert ladder.status_code == 201, ladder.content
    published = ladder_import(
        org=cast.org_a,
        doc=json.loads(LADDER_EXAMPLE.read_text()),
        model=catalog.model,
        hardware=catalog.hardware,
    )
    known = {
        "submission": submission.json()["id"],
        "model": catalog.model.slug,
        "hardware": catalog.hardware.slug,
        "ladder": ladder.json()["id"],
        "public_ladder": published.pk,
    }
    env = worker_env(
        THROTTLE_VENDOR="1000000/hour",
        THROTTLE_VENDOR_SUBMIT="1000000/hour",
        THROTTLE_ANON="1000000/hour",
    )
    server = start_gunicorn(tmp_path / "gunicorn.log", env=env)
    try:
        schema = schemathesis.openapi.from_url(f"{server.url}/api/schema/?format=json")
        yield schema, server, token, known
    finally:
        server.stop()


def _error_shape_problem(response: requests.Response) -> str | None:
    if response.status_code < 400 or "json" not in response.headers.get("Content-Type", ""):
        return None
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return f"not the error shape: {response.text[:200]}"
    if not (isinstance(error.get("code"), str) and isinstance(error.get("fields"), dict)):
        return f"not the error shape: {json.dumps(error)[:200]}"
    return None


def _known_objects(path: str, known: dict[str, object]) -> dict[str, object] | None:
    """Path parameters that name real objects of the vendor's, where the path has them."""
    if path.startswith("/api/v1/submissions/{id}"):
        return {"id": known["submission"]}
    if path.startswith("/api/v1/public/models/{slug}"):
        return {"slug": known["model"]}
    if path.startswith("/api/v1/public/hardware/{slug}"):
        return {"slug": known["hardware"]}
    if path.startswith("/api/v1/ladders/{id}"):
        return {"id": known["ladder"]}
    if path.startswith("/api/v1/public/ladders/{id}"):
        return {"id": known["public_ladder"]}
    return None


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_no_undeclared_status(fuzz_target):
    schema, server, token, known = fuzz_target
    base_url = server.url
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    statuses: Counter[int] = Counter()
    problems: list[str] = []
    named_fields = 0
    cases = 0

    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20, [op.label for op in operations]
    for operation in operations:
        passes = [(mode, None) for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]
        real = _known_objects(operation.path, known)
        if real:
            passes += [(mode, real) for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]
        for mode, path_parameters in passes:
            label = f"{operation.label} [{mode.value}{' known' if path_parameters else ''}]"

            @settings(
                max_examples=EXAMPLES_PER_OPERATION,
                derandomize=True,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(
                case=operation.as_strategy(generation_mode=mode, path_parameters=path_parameters)
            )
            def call(case) -> None:
                nonlocal cases, named_fields
                cases += 1
                response = case.call(base_url=base_url, session=session, timeout=30)
                statuses[response.status_code] += 1
                try:
                    case.validate_response(response, checks=CHECKS)
                except FailureGroup as group:  # collected: one run reports every operation
                    for failure in group.exceptions:
                        problems.append(
                            f"{label} {response.status_code}: "  # noqa: B023 - run below, in this pass
                            f"{failure.title}: {' '.join(str(failure.message).split())[:200]}"
                        )
                shape = _error_shape_problem(response)
                if shape:
                    problems.append(f"{label}: {shape}")  # noqa: B023 - run below, in this pass
                elif response.status_code == 400 and response.json()["error"]["fields"]:
                    named_fields += 1

            try:
                call()
            except Unsatisfiable:  # nothing to make invalid: an operation without inputs
                assert mode is GenerationMode.NEGATIVE, label

    server_errors = sum(n for code, n in statuses.items() if code >= 500)
    print(
        f"schemathesis: {cases} cases over {len(operations)} operations; statuses "
        f"{dict(sorted(statuses.items()))}; 400s naming a field: {named_fields}"
    )
    assert server_errors == 0, problems
    assert "Traceback" not in server.log(), server.log()[-3000:]
    assert not problems, "\n".join(dict.fromkeys(problems))
    assert cases >= 200 and statuses[200] > 0 and named_fields > 0
