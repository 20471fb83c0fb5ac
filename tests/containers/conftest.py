"""The container launcher's tests run real Podman (runc, cgroupfs) against the session's
loopback registry (tests/services.py), with a Podman storage of the tests' own."""

from __future__ import annotations

import pytest

from runner.launchers.tiny_gguf import tiny_gguf
from tests.support.container_image import pushed_llamacpp_image, registry_url


@pytest.fixture(scope="session")
def llamacpp_image() -> str:
    """The llama.cpp server image, built from local files and pushed once per session."""
    return pushed_llamacpp_image()


@pytest.fixture
def pool_host(monkeypatch, llamacpp_image):
    """A pool host that pulls from the session registry and shares the tiny GGUF's folder
    read-only (its weights folder); the image's reference is returned."""
    model = tiny_gguf(seed=0)
    monkeypatch.setenv("RUNNER_REGISTRIES", registry_url())
    monkeypatch.setenv("RUNNER_SANDBOX_RO_PATHS", str(model.parent))
    monkeypatch.setenv("RUNNER_LAUNCH_VARS", "AGENTPERF_TINY_GGUF")
    monkeypatch.setenv("AGENTPERF_TINY_GGUF", str(model))
    monkeypatch.setenv("RUNNER_CONTAINER_MEMORY", "1g")
    return llamacpp_image
