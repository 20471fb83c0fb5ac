"""The stored config read back as a model (submissions/stored_config.py,
``Submission.deployment``): every shipped example reads as the schema checked it, dispatch
builds the run spec's launch and a reviewer's launch digest from the model exactly as from
the stored document, and a stored document that does not read is the vendor's reason, never
a server error."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentperf.schema.deployment import parse_config
from catalog.models import AIModel, HardwareSystem
from runs.dispatch import DispatchError, launch_digest, launch_identity, launcher_spec
from submissions.models import Submission
from submissions.stored_config import StoredConfigError, read_config, read_published_config
from tests.submissions.configs import EXAMPLES, as_yaml, example

pytestmark = pytest.mark.django_db  # the package's throttle counters are cleared per test

DEPLOYMENT_EXAMPLES = sorted(
    p.stem for p in EXAMPLES.glob("*.yaml") if not p.stem.startswith("ladder-")
)


def stored(doc: dict[str, Any]) -> dict[str, Any]:
    """What submission_submit stores: the schema's JSON dump of the checked config."""
    return parse_config(as_yaml(doc), "application/yaml").model_dump(mode="json")


def submission(config: dict[str, Any], *, pool: str = "local-cpu") -> Submission:
    return Submission(
        pk=1,
        config=config,
        model=AIModel(slug="tiny-llamacpp-test"),
        hardware=HardwareSystem(
            slug="local-cpu", name="Local CPU", runner_pool=pool, accelerators_per_system=1
        ),
    )


@pytest.mark.parametrize("name", DEPLOYMENT_EXAMPLES)
def test_every_example_reads_as_the_schema_checked_it(name: str) -> None:
    checked = parse_config(as_yaml(example(name)), "application/yaml")
    document = checked.model_dump(mode="json")
    config = read_config(document)
    assert (config.engine.name, config.engine.version, config.engine.image) == (
        checked.engine.name,
        checked.engine.version,
        checked.engine.image,
    )
    assert config.topology.used == checked.accelerators_used
    assert config.topology.accelerators_in_system == checked.topology.accelerators_in_system
    assert config.launcher.kind == checked.launcher.kind
    assert config.benchmark.max_concurrency == checked.benchmark.max_concurrency
    # the stored fields only: what a reviewer's launch digest is computed over
    assert [r.model_dump(exclude_unset=True) for r in config.topology.roles] == document[
        "topology"
    ]["roles"]


def test_dispatch_reads_the_launch_with_its_secrets_by_name() -> None:
    doc = example("process")
    doc["launch"]["args"] = [*doc["launch"]["args"], "--api-key", {"secret": "ENGINE_API_KEY"}]
    doc["env"] = {"OMP_NUM_THREADS": "2", "ENGINE_API_KEY": {"secret": "ENGINE_API_KEY"}}
    document = stored(doc)

    pool, section = launcher_spec(submission(document))

    assert pool == "local-cpu"
    assert section["command"] == [
        document["launch"]["command"],
        *document["launch"]["args"],
    ]
    assert section["command"][-1] == {"secret": True, "name": "ENGINE_API_KEY"}
    assert section["env"] == {"OMP_NUM_THREADS": "2", "ENGINE_API_KEY": {"secret": True}}
    assert section["port"] == document["launch"]["port"]
    assert section["ready_timeout_s"] == document["launch"]["ready_timeout_s"]


@pytest.mark.parametrize("name", ["process", "container"])
def test_a_launch_digest_is_the_stored_documents_own(name: str) -> None:
    """An approval stored before the model reading still matches: the identity read through
    the model equals the one read off the stored JSON."""
    document = stored(example(name))
    launch = document["launch"]
    by_hand = {
        "kind": name,
        "pool": "local-cpu",
        "command": [launch["command"], *launch["args"]],
        "env": dict(sorted(document["env"].items())),
        "port": launch["port"],
        "image": document["engine"]["image"],
    }
    identity = launch_identity(submission(document))
    assert identity == by_hand
    assert launch_digest(identity) == launch_digest(by_hand)


def test_a_stored_document_that_does_not_read_names_its_field() -> None:
    document = stored(example("process"))
    broken = copy.deepcopy(document)
    broken["topology"]["accelerators_used"] = "many"

    with pytest.raises(StoredConfigError) as raised:
        read_config(broken)
    assert list(raised.value.fields) == ["topology.accelerators_used"]

    with pytest.raises(DispatchError, match="topology.accelerators_used"):
        launcher_spec(submission(broken))
    assert launch_identity(submission(broken)) is None  # nothing a reviewer could approve


def test_a_config_stored_before_the_one_launch_description_is_refused_with_the_reason() -> None:
    old = {
        "engine": {"name": "llamacpp", "version": "1"},
        "launcher": {"process": {"command": ["python", "-m", "server"], "port": 18000}},
    }
    with pytest.raises(DispatchError, match="launch.command is missing: resubmit"):
        launcher_spec(submission(old))


def test_a_simulated_launcher_without_a_profile_is_refused_with_the_reason() -> None:
    with pytest.raises(DispatchError, match="launcher.simulated.profile is missing"):
        launcher_spec(submission({"launcher": {"simulated": {"seed": 1}}}))


def test_a_published_config_reads_without_the_sections_a_reviewer_redacted_in_part():
    from leaderboard.configview import REDACTED, redact_paths

    document = stored(example("process"))
    published, missing = redact_paths(document, ["topology.roles.0.workers", "engine"])
    assert missing == []
    with pytest.raises(StoredConfigError):
        read_config(published)
    config = read_published_config(published)
    assert config.topology.roles == [] and config.engine.image is None  # not guessed
    assert config.launch is not None and config.launch.command == document["launch"]["command"]
    assert published["engine"] == REDACTED


def test_publishing_and_the_publish_form_answer_a_config_that_does_not_read():
    """A stored config that no longer reads is publishing's reason (PublishError, a 4xx in
    the console), and the publish form still suggests a label."""
    from leaderboard.publishing import PublishError, deployment_of
    from review.forms import suggested_label

    broken = submission({"benchmark": {"arrival": "sometimes"}})
    with pytest.raises(PublishError, match="benchmark.arrival"):
        deployment_of(broken)
    assert suggested_label(broken).startswith(broken.hardware.name)
