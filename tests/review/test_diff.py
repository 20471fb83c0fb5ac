"""The one config diff (review console and compare page) is a pure function: nested keys,
lists by position, subtrees reported once, one path syntax and one equality."""

from leaderboard.configdiff import (
    ABSENT,
    ADDED,
    CHANGED,
    REMOVED,
    DiffEntry,
    TableRow,
    config_diff,
    config_table,
    diff_summary,
)
from leaderboard.configview import diff as compare_rows


def test_identical_documents_have_no_differences():
    doc = {"engine": {"name": "vllm", "args": {"tp": 8}}, "env": ["A=1"]}
    assert config_diff(doc, {**doc}) == []


def test_a_changed_nested_value_is_reported_at_its_dotted_path():
    old = {"engine": {"args": {"max_num_seqs": 256, "tp": 8}}}
    new = {"engine": {"args": {"max_num_seqs": 512, "tp": 8}}}
    assert config_diff(old, new) == [DiffEntry("engine.args.max_num_seqs", CHANGED, 256, 512)]


def test_added_and_removed_keys_are_reported_with_their_values():
    old = {"a": 1, "gone": "x"}
    new = {"a": 1, "fresh": {"k": True}}
    assert config_diff(old, new) == [
        DiffEntry("fresh", ADDED, None, {"k": True}),
        DiffEntry("gone", REMOVED, "x", None),
    ]


def test_a_whole_new_section_is_one_entry_not_one_per_leaf():
    entries = config_diff({}, {"speculative": {"method": "eagle", "k": 3}})
    assert entries == [DiffEntry("speculative", ADDED, None, {"method": "eagle", "k": 3})]


def test_lists_are_compared_by_position_with_index_paths():
    old = {"roles": [{"name": "prefill", "tp": 4}, {"name": "decode", "tp": 8}]}
    new = {"roles": [{"name": "prefill", "tp": 2}]}
    assert config_diff(old, new) == [
        DiffEntry("roles[0].tp", CHANGED, 4, 2),
        DiffEntry("roles[1]", REMOVED, {"name": "decode", "tp": 8}, None),
    ]


def test_an_int_and_an_equal_float_are_the_same_but_a_bool_is_not_a_number():
    assert config_diff({"x": 1}, {"x": 1.0}) == []
    assert config_diff({"x": 1}, {"x": True}) == [DiffEntry("x", CHANGED, 1, True)]


def test_a_type_change_between_scalar_and_mapping_is_one_change():
    assert config_diff({"env": "A=1"}, {"env": {"A": "1"}}) == [
        DiffEntry("env", CHANGED, "A=1", {"A": "1"})
    ]


def test_keys_with_dots_are_quoted_so_paths_stay_unambiguous():
    entries = config_diff({"env": {"VLLM.X": "1"}}, {"env": {"VLLM.X": "2"}})
    assert [e.path for e in entries] == ["env.'VLLM.X'"]


def test_a_missing_document_diffs_as_empty():
    assert config_diff(None, {"a": 1}) == [DiffEntry("a", ADDED, None, 1)]


def test_entries_come_sorted_by_path_and_the_summary_counts_each_kind():
    old = {"b": 1, "a": {"y": 1, "x": 1}, "c": 0}
    new = {"b": 2, "a": {"x": 2, "z": 1}}
    entries = config_diff(old, new)
    assert [e.path for e in entries] == ["a.x", "a.y", "a.z", "b", "c"]
    assert diff_summary(entries) == {ADDED: 1, REMOVED: 2, CHANGED: 2}


def test_the_side_by_side_table_uses_the_same_paths_and_equality_as_the_diff():
    old = {"engine": {"version": "0.13.0", "tp": 8}, "args": ["--a", "--b"], "x": 1}
    new = {"engine": {"version": "0.14.0", "tp": 8.0}, "args": ["--a"], "x": True}
    rows = {r.path: r for r in config_table([old, new])}
    assert rows["engine.version"] == TableRow("engine.version", ("0.13.0", "0.14.0"), True)
    assert rows["engine.tp"].changed is False  # 8 and 8.0, as config_diff says
    assert rows["args[1]"] == TableRow("args[1]", ("--b", ABSENT), True)
    assert rows["x"].changed is True  # 1 and True differ, as config_diff says
    changed = {path for path, row in rows.items() if row.changed}
    assert changed == {e.path for e in config_diff(old, new)}


def test_the_compare_page_rows_are_the_table_redacted_as_display_text():
    rows = {r.path: r for r in compare_rows([{"env": {"HF_TOKEN": "hf_x"}, "n": 2}, {"n": 2}])}
    assert rows["env.HF_TOKEN"].values == ["[redacted]", "(absent)"]
    assert rows["env.HF_TOKEN"].changed and not rows["n"].changed
