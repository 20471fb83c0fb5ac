"""tools/check_sizes.py, the size limits `make test` holds the code to (docs/architecture.md
"Size"): a file over 700 lines or a function over 80 fails, named with its line; tests and
migrations are outside the limits. Each case is a file written to a temporary folder and
checked by the script in its own process, as make runs it; the last case is the repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "check_sizes.py"


def function(name: str, body_lines: int) -> str:
    return f"def {name}():\n" + "".join(f"    x{i} = {i}\n" for i in range(body_lines - 1))


def check(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, paths)], capture_output=True, text=True
    )


def test_a_function_over_80_lines_fails_and_is_named_with_its_line(tmp_path):
    (tmp_path / "mod.py").write_text("X = 1\n\n\n" + function("fits", 80) + function("big", 81))
    done = check(tmp_path)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [f"{tmp_path / 'mod.py'}:84  big  81 lines (limit 80)"]


def test_a_method_counts_like_a_function(tmp_path):
    method = function("big", 90).replace("\n", "\n    ")
    (tmp_path / "mod.py").write_text("class Thing:\n    " + method + "\n")
    done = check(tmp_path / "mod.py")
    assert done.returncode == 1
    assert "big  90 lines" in done.stdout


def test_a_file_over_700_lines_fails(tmp_path):
    (tmp_path / "long.py").write_text("".join(f"X{i} = {i}\n" for i in range(701)))
    (tmp_path / "fits.py").write_text("".join(f"X{i} = {i}\n" for i in range(700)))
    done = check(tmp_path)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [f"{tmp_path / 'long.py'}:1  (file)  701 lines (limit 700)"]


def test_the_repository_is_within_the_limits_outside_tests_and_migrations():
    done = check()
    assert done.returncode == 0, done.stdout + done.stderr
