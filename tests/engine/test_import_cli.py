"""``python -m agentperf.engine dataset import|generate|stats`` end to end (in process)."""

from __future__ import annotations

import json
from pathlib import Path

from agentperf.engine.cli import main
from agentperf.engine.trajectory import load_dataset

FIXTURE = Path(__file__).parent / "fixtures" / "opencode_session.json"


def test_dataset_generate_then_stats_prints_the_shape(tmp_path, capsys) -> None:
    out = tmp_path / "syn.jsonl.gz"
    assert (
        main(["dataset", "generate", "--seed", "5", "--trajectories", "6", "--out", str(out)]) == 0
    )
    ds = load_dataset(out)
    assert len(ds.trajectories) == 6
    assert ds.metadata["seed"] == 5
    capsys.readouterr()
    assert main(["dataset", "stats", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["digest"] == ds.digest()
    assert doc["trajectories"] == 6
    assert doc["input_tokens"]["min"] >= 5000


def test_dataset_import_opencode_writes_a_verified_file(tmp_path, capsys) -> None:
    out = tmp_path / "oc.jsonl.gz"
    code = main(["dataset", "import", "--format", "opencode", str(FIXTURE), "--out", str(out)])
    assert code == 0
    assert "1 trajectories, 6 turns" in capsys.readouterr().out
    assert load_dataset(out).trajectories[0].turns[0].target_output_tokens == 142


def test_dataset_import_aa_local_from_the_cached_wheel(tmp_path, capsys) -> None:
    out = tmp_path / "aa.jsonl.gz"
    args = ["dataset", "import", "--format", "aa-local", "agentperf-local", "--out", str(out)]
    assert main([*args, "--replay", "aa-mini-v1"]) == 0
    assert [t.id for t in load_dataset(out).trajectories] == ["aa-mini-v1/aa-mini-library-01"]


def test_stats_of_a_missing_file_exits_non_zero_with_one_line(tmp_path, capsys) -> None:
    assert main(["dataset", "stats", str(tmp_path / "nope.jsonl.gz")]) != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err
