"""The suite's split into side-by-side sessions (tests/shards.py): every file once, the files
that share the Podman store in one shard, the recorded time dealt out evenly."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.shards import (
    TOGETHER,
    Shard,
    _finish,
    database_url,
    deal,
    main,
    record,
    suite_files,
)


def test_every_file_runs_in_exactly_one_shard_and_the_podman_files_share_one():
    files = suite_files()
    assert "tests/foundation/test_shards.py" in files
    groups = deal(files, {}, 2)
    assert sorted(f for group in groups for f in group) == files
    holding = [i for i, group in enumerate(groups) if any(f.startswith(TOGETHER) for f in group)]
    assert len(holding) == 1
    assert all(f in groups[holding[0]] for f in files if f.startswith(TOGETHER))


def test_the_recorded_time_is_dealt_largest_first_onto_the_lightest_shard():
    files = ["tests/a/test_a.py", "tests/a/test_b.py", "tests/a/test_c.py", "tests/a/test_d.py"]
    durations = {files[0]: 100.0, files[1]: 60.0, files[2]: 50.0, files[3]: 10.0}
    # 100 | 60, then 50 onto the 60, then 10 onto the 100
    assert deal(files, durations, 2) == [[files[0], files[3]], [files[1], files[2]]]
    assert deal(files, durations, 1) == [sorted(files)]


def test_a_durations_log_is_summed_per_file(tmp_path):
    log = tmp_path / "pytest.log"
    log.write_text(
        "============ slowest durations ============\n"
        "12.50s call     tests/pipeline/test_x.py::test_one\n"
        "1.25s setup    tests/pipeline/test_x.py::test_one\n"
        "0.30s teardown tests/engine/test_y.py::TestZ::test_two[a-b]\n"
        "tests/engine/test_y.py ....                 [ 50%]\n"
    )
    assert record(log) == {"tests/engine/test_y.py": 0.3, "tests/pipeline/test_x.py": 13.8}


def test_each_shard_has_its_own_database():
    base = "postgresql://postgres@127.0.0.1:5432/agentperf"
    assert database_url(base, 0) == "postgresql://postgres@127.0.0.1:5432/agentperf_shard0"
    assert database_url(base, 1) != database_url(base, 0)


def test_named_paths_run_as_one_session(monkeypatch):
    ran = []
    monkeypatch.setattr("tests.services.main", lambda argv: ran.append(argv) or 7)
    assert (
        main(["-q", "tests/foundation/test_shards.py::test_each_shard_has_its_own_database"]) == 7
    )
    assert ran == [["-q", "tests/foundation/test_shards.py::test_each_shard_has_its_own_database"]]


def test_a_running_shards_progress_is_the_last_percentage_it_printed(tmp_path):
    from tests.shards import _progress

    log = tmp_path / "shard-0.log"
    assert _progress(log) == "?"
    log.write_text("services: PostgreSQL, RabbitMQ\n")
    assert _progress(log) == "starting"
    log.write_text(
        "tests/a/test_a.py ....   [  9%]\ntests/a/test_b.py ..   [ 46%]\ntests/a/test_c.py ."
    )
    assert _progress(log) == "46%"


def test_a_shards_outcome_is_pytests_closing_count_line():
    from tests.shards import outcome

    assert outcome("tests/a.py ..\n8 passed, 768 deselected in 9.76s\n") == (
        "8 passed, 768 deselected in 9.76s"
    )
    closing = "=== 1 failed, 775 passed, 1 warning in 810.04s (0:13:30) ==="
    assert outcome(f"x\n{closing}\n") == "1 failed, 775 passed, 1 warning in 810.04s (0:13:30)"
    assert outcome("services: PostgreSQL\nTraceback").startswith("no outcome line")


def test_each_shard_reports_its_wait_before_the_first_test_and_its_cpu_time(tmp_path, capsys):
    """Two real processes stand for shards: one writes its first test's start time and burns
    some CPU, the other fails before any test; the suite's status is the failure's."""
    shards = []
    for index, code in enumerate(
        (
            "import pathlib,sys,time; pathlib.Path(sys.argv[1]).write_text(str(time.time()));"
            " sum(range(3_000_000)); print('1 passed in 0.10s');"
            " pathlib.Path(sys.argv[2]).write_text('{\"tests/a.py\": 2.5}')",
            "import sys; print('1 failed in 0.10s'); sys.exit(3)",
        )
    ):
        log_path, first = tmp_path / f"shard-{index}.log", tmp_path / f"shard-{index}.first"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-c", code, str(first), str(log_path.with_suffix(".cpu.json"))],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        shards.append(Shard(index, process, log_path, time.time(), first))

    assert _finish(shards, time.monotonic()) == 3
    lines = capsys.readouterr().out.splitlines()
    zero = next(line for line in lines if line.startswith("shard 0: exit 0; 1 passed in 0.10s"))
    assert "first test after 0 s; CPU user" in zero
    one = next(line for line in lines if line.startswith("shard 1: exit 3"))
    assert "no test started" in one
    assert lines[-3:] == [
        "CPU by test file (2 s in all), heaviest first:",
        "      2.5 s  tests/a.py",
        lines[-1],
    ]
    assert lines[-1].startswith("suite: ") and "CPU user" in lines[-1]
