"""The `agentperf` console script as `make install` installs it, run from outside the checkout:
it finds its packages through the installed distribution, not through the working folder
(a fresh clone's `agentperf validate` once failed with "No module named 'core'")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# the deployment configs (the ladder-*.yaml files are ladder bodies, another document)
EXAMPLES = sorted(
    p for p in (REPO / "docs" / "examples").glob("*.yaml") if not p.name.startswith("ladder")
)
CONSOLE_SCRIPT = Path(sys.executable).parent / "agentperf"


def _validate(path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONSOLE_SCRIPT), "validate", str(path)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)},
    )


def test_the_installed_script_exists():
    assert CONSOLE_SCRIPT.exists(), "make install puts the agentperf script in the venv"


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_installed_validate_accepts_every_deployment_example_from_any_folder(example, tmp_path):
    proc = _validate(example, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "valid" in proc.stdout


def test_installed_validate_names_the_bad_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    text = (REPO / "docs" / "examples" / "simulated.yaml").read_text()
    bad.write_text(text.replace("schema_version: 1", "schema_version: 99", 1))
    proc = _validate(bad, tmp_path)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "schema_version" in proc.stdout + proc.stderr
