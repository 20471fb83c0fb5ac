"""What a launch would refuse is refused at submission, naming the field, before a reviewer
approves anything (issue 36 hostile findings, "checks that come too late"; docs/security.md
"Vendor commands"): the platform's own settings named in a command, a Slurm image from a
registry the pools do not pull from or with a path for a name, a Slurm launch without an image
on a platform pool, and a served model name that would put a second line into the job
script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from catalog.services import catalog_seed
from submissions.models import Submission
from tests.submissions.configs import example
from tests.submissions.support import token_client

pytestmark = pytest.mark.django_db

SLURM_EXAMPLE = (
    Path(__file__).resolve().parents[2] / "deploy" / "slurm" / "gb300-28oct-colocated.yaml"
)
DIGEST = "@sha256:" + "c" * 64


@pytest.fixture
def alice(cast, settings):
    catalog_seed()
    settings.RUNNER_REGISTRIES = "nvcr.io,registry.example"
    return token_client(cast.org_a)


def post(client, doc) -> tuple[int, dict]:
    response = client.post(
        "/api/v1/submissions/", json.dumps(doc, default=str), content_type="application/json"
    )
    return response.status_code, response.json()


def slurm_config() -> dict:
    return yaml.safe_load(SLURM_EXAMPLE.read_text())


def refused(client, doc, field: str, message: str) -> None:
    status, body = post(client, doc)
    assert status == 400, body
    assert field in body["error"]["fields"], body["error"]["fields"]
    assert message in " ".join(body["error"]["fields"][field]), body["error"]["fields"][field]
    assert not Submission.objects.exists()


def test_the_slurm_example_is_accepted(alice):
    status, body = post(alice, slurm_config())
    assert status == 201, body


@pytest.mark.parametrize("name", ["SECRET_KEY", "RUNNER_TOKEN_KEY", "AWS_SECRET_ACCESS_KEY"])
def test_a_platform_setting_in_launch_args_is_refused(alice, name):
    doc = example("process")
    doc["launch"]["args"] += ["--api-key", f"${{{name}}}"]
    index = len(doc["launch"]["args"]) - 1
    refused(alice, doc, f"launch.args.{index}", f"${{{name}}} is the platform's own setting")


def test_a_platform_setting_in_a_slurm_command_is_refused(alice):
    doc = slurm_config()
    doc["launcher"]["slurm"]["command"].append("--token=${RUNNER_TOKEN_KEY}")
    index = len(doc["launcher"]["slurm"]["command"]) - 1
    refused(alice, doc, f"launcher.slurm.command.{index}", "the platform's own setting")


def test_a_declared_variable_in_a_command_is_accepted(alice):
    doc = example("process")
    doc["launch"]["args"] += ["--port", "${PORT}"]
    status, body = post(alice, doc)
    assert status == 201, body


def test_a_slurm_image_from_a_registry_the_pools_do_not_pull_from_is_refused(alice):
    doc = slurm_config()
    doc["engine"]["image"] = "ghcr.io/someone/vllm" + DIGEST
    refused(alice, doc, "engine.image", "not one this pool pulls from")


@pytest.mark.parametrize(
    "image", ["nvcr.io/../etc/vllm", "nvcr.io//vllm", "nvcr.io/./vllm", "nvcr.io/vllm/.."]
)
def test_an_image_with_a_path_for_a_name_is_refused(alice, image):
    doc = slurm_config()
    doc["engine"]["image"] = image + DIGEST
    refused(alice, doc, "engine.image", "pattern")


def test_an_image_less_slurm_launch_is_refused_on_a_platform_pool_only(alice, cast):
    """Without an image a Slurm task would run the vendor's command bare on the node, with
    every GPU of it: a platform pool refuses it naming engine.image; a vendor's own pool
    (its machines, its submissions only) may run it on the host."""
    from catalog.models import HardwareSystem
    from submissions.models import RunnerPool

    doc = slurm_config()
    doc["engine"] = {"name": "llamacpp", "version": "b6000"}  # the engine an image is optional for
    refused(alice, doc, "engine.image", "runs each task in its pinned image")
    hardware = HardwareSystem.objects.get(slug=doc["topology"]["roles"][0]["hardware"])
    RunnerPool.objects.create(slug=hardware.runner_pool, operator_org=cast.org_a)
    status, body = post(alice, doc)
    assert status == 201, body


def test_a_served_model_name_with_a_second_line_is_refused(alice):
    doc = slurm_config()
    doc["launcher"]["slurm"]["served_model_name"] = "m\n#SBATCH --uid=0"
    refused(alice, doc, "launcher.slurm.served_model_name", "pattern")


@pytest.mark.parametrize(
    "name", ["NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"]
)
def test_a_variable_that_chooses_devices_is_refused_in_every_env(alice, name):
    """The finding: a vendor `env` could set NVIDIA_VISIBLE_DEVICES=all, which the legacy
    nvidia hook reads to expose more GPUs than were granted."""
    doc = example("container")
    doc["env"][name] = "all"
    refused(alice, doc, f"env.{name}", "chooses the accelerators")
    doc = slurm_config()
    doc["launcher"]["slurm"]["env"] = {name: "0,1,2,3"}
    refused(alice, doc, f"launcher.slurm.env.{name}", "chooses the accelerators")
