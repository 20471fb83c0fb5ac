"""At submit, a `container` config's image is checked as the pool host will check it: a
tag-only reference, a registry the platform's pools do not pull from, and a config of the old
shape (a second launch description under `launcher.process`) are each a 400 naming the field
(docs/security.md "Container launcher"). No Podman here: the vendor API alone."""

from __future__ import annotations

import json

import pytest

from catalog.services import catalog_seed
from submissions.models import Submission
from tests.submissions.configs import example
from tests.submissions.support import token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(cast, settings):
    catalog_seed()
    settings.RUNNER_REGISTRIES = "registry.example,http://127.0.0.1:5000"
    return token_client(cast.org_a)


def post(client, doc):
    response = client.post(
        "/api/v1/submissions/", json.dumps(doc, default=str), content_type="application/json"
    )
    return response.status_code, response.json()


def test_a_container_config_from_an_allowed_registry_is_accepted(alice):
    status, body = post(alice, example("container"))
    assert status == 201, body
    assert body["config"]["launcher"]["container"] == {}


@pytest.mark.parametrize(
    ("image", "message"),
    [
        ("registry.example/agentperf/llamacpp:latest", "name@sha256"),
        ("ghcr.io/agentperf/llamacpp@sha256:" + "b" * 64, "not one this pool pulls from"),
    ],
    ids=["tag-only", "registry-not-allowed"],
)
def test_an_image_the_pools_may_not_pull_is_a_400_at_engine_image(alice, image, message):
    doc = example("container")
    doc["engine"]["image"] = image
    status, body = post(alice, doc)
    assert status == 400, body
    assert list(body["error"]["fields"]) == ["engine.image"]
    assert message in body["error"]["fields"]["engine.image"][0]
    assert not Submission.objects.exists()


def test_a_config_of_the_old_shape_is_a_400_naming_the_moved_field(alice):
    doc = example("process")
    doc["launcher"] = {
        "process": {
            "command": ["python", "-m", "runner.launchers.llamacpp_server"],
            "port": 18431,
            "served_model_name": "tiny-llamacpp-test",
        }
    }
    status, body = post(alice, doc)
    assert status == 400, body
    fields = body["error"]["fields"]
    assert list(fields) == ["launcher.process.command"]
    assert "moved to launch.command and launch.args" in fields["launcher.process.command"][0]
