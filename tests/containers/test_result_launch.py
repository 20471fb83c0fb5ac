"""A result says how its deployment was started, on its page and in the public API: the
`process` launcher's results say "host process, image not run"; a `container` run names the
image that ran (leaderboard/launch.py)."""

from __future__ import annotations

import pytest

from agentperf import contract
from agentperf.documents.endpoint import AcceleratorsGiven
from demo.synthetic import make_published_result

pytestmark = pytest.mark.django_db

IMAGE = "registry.example/agentperf/llamacpp@sha256:" + "c" * 64


def _slurm(runtime: str) -> dict:
    """A Slurm job's layout as the launcher reports it (agentperf/documents/endpoint.py
    ``SlurmLayout``), with no node or task yet: what these tests read is its runtime."""
    layout = contract.SlurmLayout(
        job_id="4242",
        job_name="agentperf-run-1",
        partition=None,
        runtime=runtime,
        router=None,
        roles=[],
        nodes=[],
        tasks=[],
        accelerators=AcceleratorsGiven(used=None, given=0),
    )
    return layout.dump()


def _published(endpoint: dict):
    result = make_published_result(label="launch test")
    run = result.run
    run.runner_info = {**(run.runner_info or {}), "endpoint": endpoint}
    run.save(update_fields=["runner_info"])
    return result


@pytest.mark.parametrize(
    ("endpoint", "image_run", "note"),
    [
        ({"launcher": "process", "sandbox": "bubblewrap"}, False, "host process, image not run"),
        (
            {"launcher": "container", "sandbox": "podman", "image": IMAGE},
            True,
            "image pulled by digest and run (Podman)",
        ),
        (
            {"launcher": "slurm", "image": IMAGE, "slurm": _slurm("podman")},
            True,
            "a Slurm job on the pool&#x27;s cluster, each task in the image (podman)",
        ),
        (
            {"launcher": "slurm", "image": None, "slurm": _slurm("host")},
            False,
            "a Slurm job on the pool&#x27;s cluster; host process, image not run",
        ),
    ],
    ids=["process", "container", "slurm-podman", "slurm-host"],
)
def test_the_page_and_the_api_say_whether_the_image_ran(client, endpoint, image_run, note):
    result = _published(endpoint)
    body = client.get(f"/api/v1/public/results/{result.pk}/").json()
    assert body["launch"] == {
        "launcher": endpoint["launcher"],
        "image_run": image_run,
        "image": IMAGE if image_run else None,
        "note": note.replace("&#x27;", "'"),
    }
    page = client.get(f"/results/{result.pk}/").content.decode()
    assert f"<strong>{note}</strong>" in page
    assert (IMAGE in page) is image_run


@pytest.mark.parametrize(
    ("endpoint", "status"),
    [
        (
            {"launcher": "container", "image": IMAGE},
            "pulled by digest and run (container launcher)",
        ),
        ({"launcher": "process"}, "as declared, not run"),
        (
            {"launcher": "container", "image": IMAGE.replace("c" * 64, "d" * 64)},
            "as declared, not run",
        ),
        (
            {"launcher": "slurm", "image": IMAGE, "slurm": _slurm("podman")},
            "pulled by digest and run (slurm launcher)",
        ),
        (
            {"launcher": "slurm", "image": None, "slurm": _slurm("host")},
            "as declared, not run",
        ),
    ],
    ids=["container-ran-it", "host-process", "container-ran-another", "slurm-ran-it", "slurm-host"],
)
def test_the_receipt_says_the_image_ran_only_when_a_launcher_ran_it(endpoint, status):
    from leaderboard import receipts

    result = make_published_result(label="receipt image", config={"engine": {"image": IMAGE}})
    run = result.run
    run.runner_info = {**(run.runner_info or {}), "endpoint": endpoint}
    run.save(update_fields=["runner_info"])
    statement = receipts.publication_statement(result, [], {}, keyid="test")
    assert statement["predicate"]["image"]["reference"] == IMAGE
    assert statement["predicate"]["image"]["status"] == status
