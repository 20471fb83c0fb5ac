"""The virtual-time run's collector setting (``agentperf.simulator.virtual.VIRTUAL_GC_YOUNG``,
docs/benchmarks.md "Rack scale in under five minutes?") changes no record: a reduced rack
search (the documented rack-scale command at a low cap) writes the same trial files, byte
for byte, with it and with the collector left as the caller set it (the reference)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from agentperf.engine import cli
from agentperf.simulator import virtual

TIERS = [
    {"name": "t20", "min_p25_output_speed": 20, "max_ttft_s": 10},
    {"name": "t60", "min_p25_output_speed": 60, "max_ttft_s": 10},
    {"name": "t100", "min_p25_output_speed": 100, "max_ttft_s": 5},
    {"name": "t180", "min_p25_output_speed": 180, "max_ttft_s": 5},
    {"name": "t300", "min_p25_output_speed": 300, "max_ttft_s": 3},
]


def _digests(out: Path) -> dict[str, str]:
    files = sorted((out / "trials").glob("*/*"))
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_a_reduced_rack_search_writes_the_same_records_with_and_without_the_gc_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = tmp_path / "syn.jsonl.gz"
    argv = ["dataset", "generate", "--seed", "1", "--trajectories", "40", "--stdlib-only"]
    assert cli.main([*argv, "--out", str(dataset)]) == 0
    tiers = tmp_path / "tiers.json"
    tiers.write_text(json.dumps(TIERS))

    def search(out: Path) -> dict[str, str]:
        args = [
            "search", "--target", "sim:gb300-nvl72-dsv41-flash",
            "--model", "deepseek-v4.1-flash-max", "--dataset", str(dataset),
            "--tiers", str(tiers), "--accelerators", "72", "--cap", "32",
            "--warmup", "10", "--duration", "30", "--min-requests", "5", "--out", str(out),
        ]  # fmt: skip
        assert cli.main(args) == 0
        return _digests(out)

    assert virtual.VIRTUAL_GC_YOUNG is not None
    optimised = search(tmp_path / "optimised")
    monkeypatch.setattr(virtual, "VIRTUAL_GC_YOUNG", None)
    reference = search(tmp_path / "reference")
    assert len(optimised) >= 10  # trial.json and requests.jsonl of several trials
    assert any(name.endswith("requests.jsonl") for name in optimised)
    assert optimised == reference
