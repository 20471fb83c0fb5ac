"""Fail when a file or a function outgrows what a reader takes in at once.

`make test` runs it next to the import checks (docs/architecture.md "Size"): no Python file
over `MAX_FILE_LINES` lines and no function (or method) over `MAX_FUNCTION_LINES`, counted
from its `def` (decorators excluded) to its last line, docstring and comments included. Tests
and migrations are outside the limit: a test reads top to bottom and a migration is written
by Django.

    python tools/check_sizes.py            # the repository's tracked files
    python tools/check_sizes.py PATH ...   # these files, or the .py files under these folders

Exit status 1 lists every file and function over its limit, largest first, as
`path:line  name  N lines (limit L)`.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 80
EXEMPT_PARTS = frozenset({"tests", "migrations"})


@dataclass(frozen=True)
class Oversize:
    """One file or function over its limit."""

    path: Path
    line: int
    name: str
    lines: int
    limit: int

    def __str__(self) -> str:
        where = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{where}:{self.line}  {self.name}  {self.lines} lines (limit {self.limit})"


def tracked_files() -> list[Path]:
    """The repository's tracked Python files outside tests and migrations."""
    out = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in out if not EXEMPT_PARTS & set(Path(name).parts)]


def files_under(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for name in paths:
        path = Path(name).resolve()
        found.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return found


def oversizes(path: Path) -> list[Oversize]:
    """The file itself, if over its limit, and each function in it over its own."""
    text = path.read_text()
    found: list[Oversize] = []
    lines = len(text.splitlines())
    if lines > MAX_FILE_LINES:
        found.append(Oversize(path, 1, "(file)", lines, MAX_FILE_LINES))
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(Oversize(path, node.lineno, node.name, length, MAX_FUNCTION_LINES))
    return found


def main(argv: list[str]) -> int:
    files = files_under(argv) if argv else tracked_files()
    found = sorted(
        (o for path in files for o in oversizes(path)), key=lambda o: (-o.lines, str(o.path))
    )
    for oversize in found:
        print(oversize)
    if found:
        print(f"{len(found)} over the size limits (tools/check_sizes.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
