"""tools/check_cycles.py, the import-circle check `make test` runs next to lint-imports: it
fails on a circle, naming each import of it, a function-level (lazy) import included; only
an import under `if TYPE_CHECKING:` closes none (`--module-level` leaves lazy ones out). Each case is a package written to a
temporary folder and checked by the script in its own process, as make runs it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "check_cycles.py"

PACKAGES = {
    # a imports b at module level, b imports a in a class body: both run at import time
    "eager": {
        "a.py": "from eager import b\n\nVALUE = 1\n",
        "b.py": "class Uses:\n    from eager import a\n",
    },
    # the same circle, but b's import runs only when the function is called
    "lazy": {
        "a.py": "from lazy import b\n",
        "b.py": "def use():\n    from lazy import a\n\n    return a\n",
    },
    # b needs a for annotations only
    "typing_only": {
        "a.py": "from typing_only import b\n",
        "b.py": (
            "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from typing_only import a\n"
        ),
    },
    # three modules, the closing import under a module-level try
    "three": {
        "x.py": "import three.y\n",
        "y.py": "from three.z import Z\n",
        "z.py": "try:\n    from three import x\nexcept ImportError:\n    x = None\nZ = 1\n",
    },
}


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cycles")
    for name, files in PACKAGES.items():
        (root / name).mkdir()
        (root / name / "__init__.py").write_text("")
        for file, text in files.items():
            (root / name / file).write_text(textwrap.dedent(text))
    return root


def check(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_module_level_circle_fails_naming_each_import(packages):
    done = check(packages, "eager")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "import circle: eager.a -> eager.b -> eager.a" in done.stderr
    assert "eager/a.py:1: eager.a imports eager.b" in done.stderr
    assert "eager/b.py:2: eager.b imports eager.a" in done.stderr


def test_a_circle_of_three_is_named_in_order(packages):
    done = check(packages, "three")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "import circle: three.x -> three.y -> three.z -> three.x" in done.stderr
    assert "three/z.py:2: three.z imports three.x" in done.stderr


def test_a_lazy_import_closes_a_circle_unless_only_module_level_ones_are_asked_for(packages):
    lazy = check(packages, "lazy", "typing_only")
    assert lazy.returncode == 1
    assert "import circle: lazy.a -> lazy.b -> lazy.a" in lazy.stderr
    assert "lazy/b.py:2: lazy.b imports lazy.a" in lazy.stderr
    assert "typing_only" not in lazy.stderr  # TYPE_CHECKING imports never run
    done = check(packages, "--module-level", "lazy", "typing_only")
    assert done.returncode == 0, done.stderr
    assert "no module-level import circle among 2 packages" in done.stdout
