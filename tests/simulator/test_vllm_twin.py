"""The vLLM twin (``local-cpu-vllm``, benchmarks/vllm_holdout.py): the profile it rebuilds
for each held-out configuration, and its committed accuracy record, which is exactly the
record of the committed measurement (docs/simulator.md "Hold-out: the vLLM twin")."""

from __future__ import annotations

import json

import pytest

from agentperf.simulator.accuracy import MEASURED, holdout_path, profile_accuracy
from agentperf.simulator.profile import load_profile
from benchmarks import vllm_holdout
from benchmarks.twin_holdout import holdout_record

RESULTS = vllm_holdout.REPO / "benchmarks" / "results" / "vllm_holdout.json"


def test_a_configuration_sets_the_batch_and_the_cpu_figures_at_its_threads():
    micro = json.loads(vllm_holdout.MICRO.read_text())
    f32 = {r["threads"]: r for r in micro["measurements"] if r["type"] == "f32"}
    for text, seqs, threads in (("p8/t1", 8, 1), ("p2/t2", 2, 2)):
        prof = vllm_holdout._profile(vllm_holdout.Config.parse(text), micro)
        assert prof.roles[0].max_batch == seqs
        assert prof.peak_tflops == pytest.approx(f32[threads]["matmul_gflops"] / 1e3, rel=1e-3)
        assert prof.hbm_tb_s == pytest.approx(f32[threads]["bandwidth_gb_s"] / 1e3, rel=1e-3)


@pytest.mark.parametrize("text", ["4/2", "p4", "s4/t2", "pX/t2"])
def test_a_malformed_configuration_is_named(text: str):
    with pytest.raises(SystemExit, match="pSEQS/tTHREADS"):
        vllm_holdout.Config.parse(text)


def test_the_committed_record_is_the_committed_measurements_and_the_profile_its_fit():
    results = json.loads(RESULTS.read_text())
    record = json.loads(holdout_path("local-cpu-vllm").read_text())
    assert record == holdout_record(results, vllm_holdout.VLLM)
    # the profile carries the values fitted on the fit configuration
    prof = load_profile("local-cpu-vllm")
    fitted = results["fitted"]
    assert prof.compute_efficiency == pytest.approx(fitted["efficiency.compute"])
    assert prof.iteration_overhead_us == pytest.approx(fitted["efficiency.iteration_overhead_us"])
    assert prof.sched_per_sequence_us == pytest.approx(fitted["scheduler.per_sequence_us"])
    fit_rows = [r for r in results["rows"] if r["role"] == "fit"]
    assert {r["config"] for r in fit_rows} == {vllm_holdout.VLLM.fit_config}
    held = {r["config"] for r in results["rows"] if r["role"] == "held out"}
    assert held == set(vllm_holdout.VLLM.holdout.split(","))


def test_the_accuracy_page_judges_the_vllm_twin_on_what_it_was_not_fitted_to():
    acc = profile_accuracy("local-cpu-vllm")
    assert len(acc.figures) == 18 and {f.basis for f in acc.figures} == {MEASURED}
    assert acc.mape is not None
