"""Dataset files validate against docs/trajectory.schema.json."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import jsonschema
import pytest

from agentperf.engine.datasets.opencode import import_opencode
from agentperf.engine.datasets.synthetic import generate_dataset
from agentperf.engine.trajectory import save_dataset

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "trajectory.schema.json").read_text())
FIXTURE = Path(__file__).parent / "fixtures" / "opencode_session.json"


def validators():
    cls = jsonschema.Draft202012Validator
    cls.check_schema(SCHEMA)
    header = cls({"$ref": "#/$defs/header", "$defs": SCHEMA["$defs"]})
    return header, cls(SCHEMA)


def validate_file(path: Path) -> int:
    header, trajectory = validators()
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    header.validate(json.loads(lines[0]))
    for line in lines[1:]:
        trajectory.validate(json.loads(line))
    return len(lines) - 1


def test_synthetic_dataset_file_matches_the_schema(tmp_path) -> None:
    path = tmp_path / "syn.jsonl.gz"
    save_dataset(path, generate_dataset(seed=3, trajectories=4))
    assert validate_file(path) == 4


def test_opencode_dataset_file_matches_the_schema(tmp_path) -> None:
    path = tmp_path / "oc.jsonl.gz"
    save_dataset(path, import_opencode(FIXTURE))
    assert validate_file(path) == 1


def test_schema_rejects_a_turn_with_zero_output_tokens() -> None:
    _header, trajectory = validators()
    bad = {
        "id": "t",
        "tools": [],
        "metadata": {},
        "turns": [
            {
                "keep_messages": 0,
                "new_messages": [{"role": "user", "content": "hi"}],
                "target_output_tokens": 0,
                "tool_delay_s": 0.0,
                "recorded_prompt_tokens": None,
                "recorded_cached_tokens": None,
                "tools": None,
                "message_tokens": None,
                "metadata": {},
            }
        ],
    }
    with pytest.raises(jsonschema.ValidationError, match="minimum"):
        trajectory.validate(bad)
