"""benchmarks/search_cost.py in its smallest form: the same tree searched whole and with
mean-field trials, side by side in one run (docs/benchmarks.md "Rack scale in under five
minutes: mean-field trials"): the report names the differing trials and, because they
differ, compares each tier's max agents and each concurrency both searches ran."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks import search_cost

REPO = Path(__file__).resolve().parents[2]


def test_search_cost_compares_a_mean_field_search_with_the_whole_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    argv = [
        "search_cost", "--tree", f"{REPO}=whole", "--tree", f"{REPO}=sliced",
        "--args", "sliced=--mean-field 4 --warmup 10 --min-requests 5",
        "--args", "whole=--warmup 10 --min-requests 5",
        "--cap", "16", "--duration", "20", "--work", str(work),
    ]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    search_cost.main()
    out = capsys.readouterr().out
    whole = json.loads((work / "whole" / "cost.json").read_text())
    sliced = json.loads((work / "sliced" / "cost.json").read_text())
    factors = {t["concurrency"]: t["mean_field"] for t in sliced["trials"]}
    assert factors[1] == 1 and factors[16] == 4  # 16 agents on a quarter of the rack
    assert all(t["mean_field"] == 1 for t in whole["trials"])
    assert "--mean-field 4" in sliced["command"] and "--mean-field" not in whole["command"]
    assert "whole vs sliced:" in out and "max agents per tier:" in out
    for tier, n in whole["max_agents"].items():
        assert f"    {tier}: {n} vs {sliced['max_agents'][tier]}" in out
    assert "N=16 k=4: " in out
    # the trials the two share without slicing (N < 8) are the same bytes
    assert "N=1 k=1: " in out and "trial 0 N=1: differs" not in out
