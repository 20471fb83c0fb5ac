"""Importing the AA-AgentPerf local replay traces shipped in the agentperf-local wheel.

The wheel is downloaded once with pip into $AGENTPERF_CACHE (or ~/.cache/agentperf) and read
as a zip; the package itself (Python >= 3.12) is never installed.
"""

from __future__ import annotations

import json

import pytest

from agentperf.engine.datasets.aa_local import (
    export_rows,
    fetch_wheel,
    import_aa_local,
    iter_traces,
)
from agentperf.engine.tokens import TokenCounter
from agentperf.engine.trajectory import dataset_from_bytes, dataset_to_bytes


@pytest.fixture(scope="module")
def wheel():
    return fetch_wheel()


@pytest.fixture(scope="module")
def traces(wheel):
    return {f"{folder}/{task['task_id']}": rows for folder, _m, task, rows in iter_traces(wheel)}


@pytest.fixture(scope="module")
def dataset(wheel):
    return import_aa_local(wheel, counter=TokenCounter())


def test_wheel_ships_nine_tasks_with_174_recorded_rows(traces) -> None:
    assert len(traces) == 9
    assert sum(len(rows) for rows in traces.values()) == 174
    assert "aa-mini-v1/aa-mini-library-01" in traces
    assert "agentperf-default-v1/django__django-15851" in traces


def test_replaying_an_imported_trace_sends_exactly_the_recorded_messages(dataset, traces) -> None:
    assert {t.id for t in dataset.trajectories} == set(traces)
    for trajectory in dataset.trajectories:
        rows = traces[trajectory.id]
        assert len(trajectory.turns) == len(rows)
        for k, row in enumerate(rows):
            assert trajectory.prompt(k) == row["messages"], (trajectory.id, k)
            assert list(trajectory.tools_for(k)) == row["tools"]
        assert list(trajectory.iter_prompts()) == [row["messages"] for row in rows]


def test_import_is_lossless_rows_rebuild_exactly(dataset, traces) -> None:
    for trajectory in dataset.trajectories:
        assert export_rows(trajectory) == traces[trajectory.id]


def test_ephemeral_trailing_messages_are_dropped_by_keep_messages(dataset) -> None:
    swe = next(t for t in dataset.trajectories if t.id.endswith("django__django-15851"))
    prompts = list(swe.iter_prompts())
    assert swe.turns[1].keep_messages == len(prompts[0]) - 1
    assert prompts[0][-1]["content"].startswith("Tool-call turn 1 of 100")


def test_recorded_counts_delays_and_targets_are_kept(dataset, traces) -> None:
    k8s = next(t for t in dataset.trajectories if t.id.endswith("task_k8s_debugging"))
    row0 = traces[k8s.id][0]
    assert k8s.turns[0].target_output_tokens == row0["target_output_tokens"] == 53
    assert k8s.turns[0].recorded_prompt_tokens == row0["recorded_prompt_tokens"] == 6888
    assert k8s.turns[0].tool_delay_s == pytest.approx(row0["simulated_tool_delay_ms_after"] / 1000)
    assert k8s.metadata["aa_task"]["required_context_tokens"] == 16384


def test_a_row_with_different_tools_overrides_them_on_its_turn(dataset, traces) -> None:
    mini = next(t for t in dataset.trajectories if t.id == "aa-mini-v1/aa-mini-library-01")
    assert len(mini.tools) == 4
    assert mini.turns[-1].tools == ()
    assert mini.turns[0].tools is None


def test_local_token_counts_track_the_recorded_prompt_sizes(dataset) -> None:
    ratios = []
    for trajectory in dataset.trajectories:
        for local, turn in zip(trajectory.prompt_tokens(), trajectory.turns, strict=True):
            if turn.recorded_prompt_tokens:
                ratios.append(local / turn.recorded_prompt_tokens)
    assert len(ratios) == 168
    ratios.sort()
    # Different tokenizers and chat templates, same text: within a factor of 1.5.
    assert 0.66 < ratios[len(ratios) // 2] < 1.5


def test_swebench_tasks_carry_their_repository(dataset) -> None:
    django = next(t for t in dataset.trajectories if t.id.endswith("django__django-14500"))
    assert django.metadata["repo"] == "django/django"
    assert django.metadata["language"] == "python"


def test_imported_dataset_round_trips_through_the_file_format(dataset) -> None:
    again = dataset_from_bytes(dataset_to_bytes(dataset))
    assert again == dataset
    assert again.digest() == dataset.digest()


def test_import_reads_an_unpacked_replays_folder_too(wheel, tmp_path, traces) -> None:
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        members = [n for n in z.namelist() if n.startswith("agentperf_local/data/replays/aa-mini")]
        z.extractall(tmp_path, members)
    ds = import_aa_local(tmp_path / "agentperf_local" / "data" / "replays")
    assert [t.id for t in ds.trajectories] == ["aa-mini-v1/aa-mini-library-01"]
    assert export_rows(ds.trajectories[0]) == traces["aa-mini-v1/aa-mini-library-01"]
    assert json.loads(json.dumps(ds.trajectories[0].to_dict()))["id"] == ds.trajectories[0].id


def test_aa_dataset_file_matches_the_schema(dataset, tmp_path) -> None:
    from agentperf.engine.trajectory import save_dataset
    from tests.engine.test_trajectory_schema import validate_file

    path = tmp_path / "aa.jsonl.gz"
    save_dataset(path, dataset)
    assert validate_file(path) == 9
