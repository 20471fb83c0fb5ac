"""The quality floor with real engines: llama.cpp (PyPI xllamacpp) serving the tiny GGUF in
F32 (the reference), the same weights quantized to Q8_0 and Q4_0 (gguf package), and a
model with other weights (docs/verification.md "quality_distribution")."""

from __future__ import annotations

import json

import pytest

from agentperf.engine.jobs import Target, run_on_target
from agentperf.verification.checks import check_model_identity, check_quality_distribution
from agentperf.verification.fingerprint import REFERENCES_DIR, collect_canaries
from agentperf.verification.quality import collect_distributions, compare_distributions
from runner.launchers.tiny_gguf import TinyModelParams, tiny_gguf
from runner.verification.reference import record_reference
from tests.support.llamacpp import start_llama_server

pytestmark = [pytest.mark.slow, pytest.mark.llamacpp]

BUILDS = {
    "f32": (dict(seed=0), "gguf_f32"),
    "q8_0": (dict(seed=0, params=TinyModelParams(weights="q8_0")), "gguf_q8_0"),
    "q4_0": (dict(seed=0, params=TinyModelParams(weights="q4_0")), "gguf_q4_0"),
    "other": (dict(seed=1), "gguf_f32"),
}


@pytest.fixture(scope="module")
def reference() -> dict:
    server = start_llama_server(tiny_gguf(seed=0))
    try:
        doc = record_reference(
            base_url=server.base_url,
            model="tiny",
            slug="tiny",
            precision="gguf_f32",
            deployment="llama.cpp F32",
        )
    finally:
        server.stop()
    doc["source"] = "recorded in this test"
    return doc


@pytest.fixture(scope="module")
def probes(reference) -> dict[str, list[dict]]:
    """Each build's qualification probes as a worker reports them: canaries, distributions."""
    out = {}
    for name, (build, _) in BUILDS.items():
        server = start_llama_server(tiny_gguf(**build))
        try:

            async def main(transport, clock):
                canaries = await collect_canaries(transport, clock, model="tiny")
                dists = await collect_distributions(
                    transport, clock, model="tiny", reference=reference
                )
                return canaries, dists

            canaries, dists = run_on_target(Target(base_url=server.base_url), main)
        finally:
            server.stop()
        out[name] = [
            {"name": "canary_outputs", "status": "pass", "evidence": canaries},
            {"name": "next_token_distributions", "status": "pass", "evidence": dists},
        ]
    return out


def _figures(probes, reference, name):
    evidence = probes[name][1]["evidence"]
    compared = compare_distributions(evidence, reference)
    print(
        f"{name}: mean KL {compared['mean_kl']}, top-1 {compared['top1_agreement']}, "
        f"{compared['positions']} positions"
    )
    return compared


def test_kl_and_top1_agreement_order_f32_q8_q4_and_another_model(probes, reference):
    figures = {name: _figures(probes, reference, name) for name in BUILDS}
    kl = [figures[n]["mean_kl"] for n in ("f32", "q8_0", "q4_0", "other")]
    top1 = [figures[n]["top1_agreement"] for n in ("f32", "q8_0", "q4_0", "other")]
    assert kl[0] < kl[1] < kl[2] < kl[3], kl
    assert top1[0] >= top1[1] >= top1[2] > top1[3], top1
    assert kl[0] < 1e-4 and top1[0] == 1.0  # the same file on another server: no drift
    assert kl[3] > 1.0  # another model is far outside any precision's noise


def test_the_gate_passes_f32_and_q8_0_and_fails_another_model(probes, reference):
    for name, expected in (("f32", "pass"), ("q8_0", "pass"), ("other", "fail")):
        check = check_quality_distribution(
            probes[name], reference, model="tiny", weight_precision=BUILDS[name][1]
        )
        assert check["status"] == expected, (name, check["summary"])
        assert check["evidence"]["limits"]["precision"] == BUILDS[name][1]


def test_a_q4_0_build_declared_as_f32_fails_the_gate(probes, reference):
    """Degraded weights behind a full-precision claim: the drift is outside f32's limits."""
    check = check_quality_distribution(
        probes["q4_0"], reference, model="tiny", weight_precision="gguf_f32"
    )
    assert check["status"] == "fail", check["summary"]


def test_model_identity_accepts_honest_lower_precision_and_still_fails_another_model(
    probes, reference
):
    for name in ("f32", "q8_0", "q4_0"):
        check = check_model_identity(
            probes[name], reference, model="tiny", weight_precision=BUILDS[name][1]
        )
        assert check["status"] == "pass", (name, check["summary"])
    other = check_model_identity(
        probes["other"], reference, model="tiny", weight_precision="gguf_f32"
    )
    assert other["status"] == "fail", other["summary"]


def test_a_model_without_a_reference_says_so_instead_of_passing(probes):
    check = check_quality_distribution(
        probes["f32"], None, model="unknown-model", weight_precision="bf16"
    )
    assert (
        check["status"] == "warn" and check["summary"] == "quality: no reference for unknown-model"
    )


def test_the_shipped_reference_of_the_demo_model_is_reproduced_by_its_f32_build(probes):
    shipped = json.loads((REFERENCES_DIR / "tiny-llamacpp-test.json").read_text())
    fresh = probes["f32"][1]["evidence"]
    assert [t["id"] for t in shipped["distributions"]["texts"]] == [t["id"] for t in fresh["texts"]]
    compared = compare_distributions(fresh, shipped)
    assert compared["top1_agreement"] == 1.0 and compared["mean_kl"] < 1e-3, compared
