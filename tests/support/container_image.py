"""The llama.cpp server image in the session's loopback registry (tests/services.py starts
it; demo/container_image.py builds the image from local files)."""

from __future__ import annotations

import functools
import os

from demo.container_image import push_image


@functools.cache
def pushed_llamacpp_image() -> str:
    """The test image in this session's registry (`TEST_REGISTRY`, started by tests/services.py),
    pushed once per test process; its reference pinned by digest."""
    registry = os.environ.get("TEST_REGISTRY")
    if not registry:
        raise RuntimeError(
            "TEST_REGISTRY is not set: run the tests through `python -m tests.services`, which "
            "starts the loopback registry (make containers installs it)"
        )
    from runner.launchers.container import podman_global_argv

    return push_image(podman_global_argv(), registry)


def registry_url() -> str:
    """The session registry as a pool host lists it in RUNNER_REGISTRIES (plain HTTP)."""
    return f"http://{os.environ['TEST_REGISTRY']}"
