"""Model identity against a real llama.cpp server (PyPI xllamacpp, tiny GGUF built here):
a reference recorded from one server of a GGUF is matched by another server of the same
file and refused for a GGUF with other weights (another seed)."""

from __future__ import annotations

import pytest

from agentperf.engine.jobs import Target, run_on_target
from agentperf.verification.checks import check_model_identity
from agentperf.verification.fingerprint import (
    collect_canaries,
    compare_canaries,
    reference_document,
)
from runner.launchers.tiny_gguf import tiny_gguf
from tests.support.llamacpp import start_llama_server

pytestmark = pytest.mark.slow


def _canaries(model_path) -> dict:
    server = start_llama_server(model_path)
    try:

        async def main(transport, clock):
            return await collect_canaries(transport, clock, model="tiny")

        return run_on_target(Target(base_url=server.base_url), main)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def reference() -> dict:
    collected = _canaries(tiny_gguf(seed=0))
    assert all(c["ok"] for c in collected["canaries"]), collected
    return reference_document(model_slug="tiny", deployment="llama.cpp seed 0", collected=collected)


def _as_probe(collected: dict) -> list[dict]:
    return [{"name": "canary_outputs", "status": "pass", "evidence": collected}]


def test_the_same_gguf_on_another_server_matches_its_reference(reference):
    check = check_model_identity(_as_probe(_canaries(tiny_gguf(seed=0))), reference, model="tiny")
    assert check["status"] == "pass", check
    assert all(c["match"] == "exact" for c in check["evidence"]["canaries"])


def test_a_gguf_with_other_weights_fails_model_identity(reference):
    other = _canaries(tiny_gguf(seed=1))
    check = check_model_identity(_as_probe(other), reference, model="tiny")
    assert check["status"] == "fail", check
    compared = compare_canaries(other, reference)
    assert sum(c["match"] == "diverged" for c in compared) >= len(compared) - 1


def test_the_reference_carries_top_k_logprobs_when_llamacpp_sends_them(reference):
    first = reference["canaries"][0]
    assert first["output"]
    if "tokens" in first:  # llama.cpp streams OpenAI-style logprobs: judge near ties with them
        assert len(first["top"][0]) >= 2
        assert first["tokens"][0] in first["top"][0]
