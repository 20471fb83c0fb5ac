"""The turn model, canonical encoding and dataset files."""

from __future__ import annotations

import gzip
import json

import pytest

from agentperf.engine.trajectory import (
    Dataset,
    DatasetError,
    Trajectory,
    Turn,
    canonical_json,
    dataset_from_bytes,
    dataset_to_bytes,
    load_dataset,
    save_dataset,
    turns_from_prompts,
)


def msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def make_trajectory(tid: str = "t1") -> Trajectory:
    sys_ = msg("system", "You are a coding agent. ü")
    u = msg("user", "fix the bug")
    a1 = msg("assistant", "reading file")
    t1 = msg("tool", "def f(): pass")
    eph = msg("user", "<reminder>ephemeral</reminder>")
    a2 = msg("assistant", "done")
    return Trajectory(
        id=tid,
        turns=(
            Turn(0, (sys_, u), 10, 1.5, message_tokens=(7, 3)),
            Turn(2, (a1, t1, eph), 20, 0.25, message_tokens=(2, 5, 4)),
            # Drops the ephemeral reminder and continues from the tool result.
            Turn(4, (a2, msg("user", "thanks")), 5, 0.0, message_tokens=(1, 1)),
        ),
        tools=({"type": "function", "function": {"name": "read"}},),
        metadata={"language": "python"},
    )


def test_turn_prompt_keeps_prefix_then_appends_new_messages() -> None:
    tr = make_trajectory()
    assert [m["content"] for m in tr.prompt(0)] == ["You are a coding agent. ü", "fix the bug"]
    assert len(tr.prompt(1)) == 5
    assert [m["content"] for m in tr.prompt(2)] == [
        "You are a coding agent. ü",
        "fix the bug",
        "reading file",
        "def f(): pass",
        "done",
        "thanks",
    ]


def test_iter_prompts_matches_prompt_of_every_turn() -> None:
    tr = make_trajectory()
    assert list(tr.iter_prompts()) == [tr.prompt(k) for k in range(len(tr.turns))]


def test_prompt_message_tokens_follow_the_same_cut() -> None:
    tr = make_trajectory()
    assert tr.prompt_message_tokens(2) == (7, 3, 2, 5, 1, 1)
    assert list(tr.iter_prompt_message_tokens()) == [tr.prompt_message_tokens(k) for k in range(3)]
    assert tr.prompt_tokens() == [10, 21, 19]


def test_prompt_message_tokens_are_none_when_a_turn_lacks_counts() -> None:
    base = make_trajectory()
    turns = (base.turns[0], Turn(2, base.turns[1].new_messages, 20), base.turns[2])
    tr = Trajectory("x", turns)
    assert tr.prompt_message_tokens(0) == (7, 3)
    assert tr.prompt_message_tokens(2) is None
    assert list(tr.iter_prompt_message_tokens())[1:] == [None, None]


def test_turn_tools_override_trajectory_tools() -> None:
    tr = make_trajectory()
    override = ({"type": "function", "function": {"name": "write"}},)
    tr2 = Trajectory("y", (tr.turns[0], Turn(2, (msg("user", "x"),), 3, tools=override)), tr.tools)
    assert tr2.tools_for(0) == tr.tools
    assert tr2.tools_for(1) == override


def test_turns_from_prompts_reproduces_every_prompt() -> None:
    prompts = [
        [msg("system", "s"), msg("user", "u")],
        [msg("system", "s"), msg("user", "u"), msg("assistant", "a"), msg("user", "e")],
        [msg("system", "s"), msg("user", "u"), msg("assistant", "a"), msg("tool", "r")],
        [msg("system", "other")],
    ]
    turns = turns_from_prompts(prompts, target_output_tokens=[1, 2, 3, 4])
    assert [t.keep_messages for t in turns] == [0, 2, 3, 0]
    tr = Trajectory("p", turns)
    assert list(tr.iter_prompts()) == prompts


def test_validate_rejects_keep_beyond_previous_prompt() -> None:
    tr = Trajectory("bad", (Turn(0, (msg("user", "a"),), 1), Turn(3, (msg("user", "b"),), 1)))
    with pytest.raises(DatasetError, match="keep_messages=3"):
        tr.validate()


def test_validate_rejects_mismatched_message_token_counts() -> None:
    tr = Trajectory("bad", (Turn(0, (msg("user", "a"),), 1, message_tokens=(1, 2)),))
    with pytest.raises(DatasetError, match="message_tokens"):
        tr.validate()


def test_canonical_json_sorts_keys_without_whitespace_in_utf8() -> None:
    assert canonical_json({"b": 1, "a": ["é", 1.5]}) == '{"a":["é",1.5],"b":1}'


def test_dataset_round_trips_through_a_gzip_file(tmp_path) -> None:
    ds = Dataset("demo", "1", (make_trajectory("a"), make_trajectory("b")), {"source": "test"})
    path = tmp_path / "d.jsonl.gz"
    digest = save_dataset(path, ds)
    assert digest == ds.digest()
    loaded = load_dataset(path)
    assert loaded == ds
    assert loaded.digest() == digest
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    header = json.loads(lines[0])
    assert header["digest"] == digest and header["trajectories"] == 2
    assert json.loads(lines[1])["id"] == "a"


def test_dataset_file_bytes_are_deterministic() -> None:
    ds = Dataset("demo", "1", (make_trajectory(),))
    assert dataset_to_bytes(ds) == dataset_to_bytes(ds)


def test_digest_changes_when_any_content_changes() -> None:
    a = Dataset("demo", "1", (make_trajectory(),))
    tr = make_trajectory()
    changed = Trajectory(tr.id, tr.turns[:2], tr.tools, tr.metadata)
    assert a.digest() != Dataset("demo", "1", (changed,)).digest()
    assert a.digest() != Dataset("demo", "2", (tr,)).digest()


def test_loading_a_tampered_file_fails_the_digest_check() -> None:
    ds = Dataset("demo", "1", (make_trajectory(),))
    text = gzip.decompress(dataset_to_bytes(ds)).decode()
    tampered = text.replace("fix the bug", "fix the bug!").encode()
    with pytest.raises(DatasetError, match="digest mismatch"):
        dataset_from_bytes(tampered)
    assert dataset_from_bytes(tampered, verify=False).trajectories[0].prompt(0)[1]["content"] == (
        "fix the bug!"
    )


def test_non_canonical_but_equal_file_still_verifies() -> None:
    ds = Dataset("demo", "1", (make_trajectory(),))
    lines = gzip.decompress(dataset_to_bytes(ds)).decode().splitlines()
    pretty = "\n".join(json.dumps(json.loads(line), indent=None) for line in lines) + "\n"
    assert dataset_from_bytes(pretty.encode()) == ds


def test_max_prompt_tokens_uses_local_counts() -> None:
    ds = Dataset("demo", "1", (make_trajectory(),))
    assert ds.max_prompt_tokens() == 21
