"""Importing OpenCode session exports (fixture: tests/engine/fixtures/opencode_session.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentperf.engine.datasets.opencode import export_session, import_opencode
from agentperf.engine.tokens import TokenCounter
from agentperf.engine.trajectory import DatasetError

FIXTURE = Path(__file__).parent / "fixtures" / "opencode_session.json"


@pytest.fixture(scope="module")
def trajectory():
    return import_opencode(FIXTURE, counter=TokenCounter()).trajectories[0]


def test_every_model_step_becomes_one_turn(trajectory) -> None:
    # Five steps in the first assistant message, one in the second.
    assert len(trajectory.turns) == 6
    assert trajectory.id == "opencode/ses_7a1c2e9f0ffeKq3ZbN1xW8yTeu"
    assert trajectory.metadata["generating_model"] == "claude-sonnet-4-5"


def test_output_tokens_come_from_each_steps_tokens_output(trajectory) -> None:
    assert [t.target_output_tokens for t in trajectory.turns] == [142, 231, 58, 41, 96, 188]


def test_recorded_prompt_tokens_add_cached_input(trajectory) -> None:
    first = trajectory.turns[0]
    assert first.recorded_prompt_tokens == 3 + 11805 + 310
    assert first.recorded_cached_tokens == 11805


def test_tool_delays_are_the_wall_span_of_each_steps_tools(trajectory) -> None:
    delays = [t.tool_delay_s for t in trajectory.turns]
    assert delays == pytest.approx([0.052, 0.05, 1.75, 0.02, 0.0, 0.0])


def test_prompts_replay_the_conversation_with_tool_calls_and_results(trajectory) -> None:
    first = trajectory.prompt(0)
    assert [m["role"] for m in first] == ["user"]
    assert "Called the Read tool" in first[0]["content"]
    second = trajectory.prompt(1)
    assert [m["role"] for m in second] == ["user", "assistant", "tool", "tool"]
    call = second[1]["tool_calls"][0]
    assert call["function"]["name"] == "read"
    assert json.loads(call["function"]["arguments"]) == {
        "filePath": "/home/dev/durations/durations.py"
    }
    assert second[2] == {
        "role": "tool",
        "tool_call_id": "toolu_01Hx9",
        "content": second[2]["content"],
    }
    assert "def parse_duration" in second[2]["content"]
    errored = trajectory.prompt(4)[-1]
    assert errored["content"] == "Error: mypy: command not found"
    last = trajectory.prompt(5)
    assert last[-1] == {"role": "user", "content": "Also accept uppercase units."}
    assert last[-2]["content"].startswith("Fixed: `parse_duration`")


def test_each_turn_only_appends_to_the_previous_prompt(trajectory) -> None:
    prompts = list(trajectory.iter_prompts())
    for k in range(1, len(prompts)):
        assert trajectory.turns[k].keep_messages == len(prompts[k - 1])


def test_import_is_lossless_the_export_rebuilds_exactly(trajectory) -> None:
    original = json.loads(FIXTURE.read_text())
    assert export_session(trajectory) == original


def test_local_token_counts_cover_every_new_message(trajectory) -> None:
    for turn in trajectory.turns:
        assert turn.message_tokens is not None
        assert len(turn.message_tokens) == len(turn.new_messages)
        assert all(n > 3 for n in turn.message_tokens)


def test_a_file_that_is_not_an_export_is_rejected(tmp_path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"sessions": []}')
    with pytest.raises(DatasetError, match="opencode export"):
        import_opencode(bad)
