"""The llama.cpp server image in the session's loopback registry (tests/services.py starts
it; demo/container_image.py builds the image from local files)."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

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


@contextlib.contextmanager
def vllm_image_registry() -> Iterator[tuple[str, str]]:
    """(the vLLM image's reference, the registry's URL for RUNNER_REGISTRIES): a loopback
    registry over a folder kept in the host's cache (`$AGENTPERF_CACHE/vllm/registry`), so
    the 2.8 GB image is pushed on a host's first session only and later ones find it there
    (push_image asks the registry first); each session still pulls it into its own Podman
    storage by digest, as a pool host does."""
    from demo.container_image import VLLM, start_registry
    from runner.launchers.base import free_port
    from runner.launchers.container import podman_global_argv
    from runner.launchers.vllm_env import home

    registry = start_registry(home() / "registry", free_port())
    try:
        yield push_image(podman_global_argv(), registry.host, VLLM), f"http://{registry.host}"
    finally:
        registry.stop()
