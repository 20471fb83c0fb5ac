"""Fail when an import circle is left among the first-party modules.

`make test` runs it next to `lint-imports` (docs/architecture.md "Layers"). The packages are
import-linter's `root_packages` in pyproject.toml; the graph is grimp's (import-linter's graph
library), without the imports under `if TYPE_CHECKING:` (they never run). Every other import
counts: at module level, in a class body, under a module-level `if`/`try`, and inside a
function (a lazy import closing a circle is a circle that waits for its first call).

    python tools/check_cycles.py                   # the repository's packages
    python tools/check_cycles.py pkg ...           # these packages (importable from the path)
    python tools/check_cycles.py --module-level    # only what runs at import time (a report)

Exit status 1 names each circle, one import per line with its file and line, as
`a -> b -> a`.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Import:
    """One module-level import: `importer` imports `imported` at `line` of `path`."""

    importer: str
    imported: str
    path: Path
    line: int


def root_packages(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """import-linter's root packages: the first-party packages."""
    config = tomllib.loads(pyproject.read_text())
    return list(config["tool"]["importlinter"]["root_packages"])


def _module_path(module: str, roots: dict[str, Path]) -> Path:
    top, *rest = module.split(".")
    base = roots[top].joinpath(*rest)
    package = base / "__init__.py"
    return package if package.exists() else base.with_suffix(".py")


def _eager_lines(tree: ast.Module, *, lazy: bool = False) -> set[int]:
    """The lines of the import statements that run when the module is imported: everything
    but what a function body holds (with `lazy`, those too)."""
    lines: set[int] = set()
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if not lazy and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                lines.add(child.lineno)
            stack.append(child)
    return lines


def module_level_imports(packages: list[str], *, lazy: bool = False) -> list[Import]:
    """Every module-level import from one first-party module to another (with `lazy`, every
    import, function-level ones too)."""
    roots: dict[str, Path] = {}
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit(f"check_cycles: no package {name!r} on the path")
        roots[name] = Path(next(iter(spec.submodule_search_locations)))
    graph = grimp.build_graph(*packages, exclude_type_checking_imports=True, cache_dir=None)
    found: list[Import] = []
    for importer in sorted(graph.modules):
        path = _module_path(importer, roots)
        eager = _eager_lines(ast.parse(path.read_bytes(), filename=str(path)), lazy=lazy)
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            details = graph.get_import_details(importer=importer, imported=imported)
            lines = sorted(d["line_number"] for d in details if d["line_number"] in eager)
            if lines:
                found.append(Import(importer, imported, path, lines[0]))
    return found


def find_cycles(imports: list[Import]) -> list[list[Import]]:
    """One circle per strongly connected group of modules (Tarjan), as the imports that close
    it, shortest first found from the group's first module; a module importing itself counts."""
    edges: dict[str, dict[str, Import]] = {}
    for imp in imports:
        edges.setdefault(imp.importer, {})[imp.imported] = imp
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []

    def connect(start: str) -> None:  # iterative Tarjan: deep graphs stay off the C stack
        work = [(start, iter(sorted(edges.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1 or node in edges.get(node, {}):
                    groups.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            connect(module)

    cycles = []
    for group in sorted(groups):
        members = set(group)
        first = group[0]
        # breadth-first from `first` inside the group, back to `first`
        came_from: dict[str, Import] = {}
        frontier = [first]
        closing: Import | None = None
        while frontier and closing is None:
            following = []
            for node in frontier:
                for child, imp in sorted(edges.get(node, {}).items()):
                    if child == first:
                        closing = imp
                        break
                    if child in members and child not in came_from:
                        came_from[child] = imp
                        following.append(child)
                if closing is not None:
                    break
            frontier = following
        assert closing is not None  # a strongly connected group leads back to its first
        path = [closing]
        while path[0].importer != first:
            path.insert(0, came_from[path[0].importer])
        cycles.append(path)
    return cycles


def describe(cycle: list[Import]) -> str:
    names = " -> ".join([cycle[0].importer, *(imp.imported for imp in cycle)])
    where = "\n".join(
        f"    {imp.path.relative_to(ROOT) if imp.path.is_relative_to(ROOT) else imp.path}:"
        f"{imp.line}: {imp.importer} imports {imp.imported}"
        for imp in cycle
    )
    return f"import circle: {names}\n{where}"


def main(argv: list[str]) -> int:
    lazy = "--module-level" not in argv
    names = [a for a in argv if a != "--module-level"]
    packages = names or root_packages()
    if not names:
        sys.path.insert(0, str(ROOT))
    kind = "import" if lazy else "module-level import"
    cycles = find_cycles(module_level_imports(packages, lazy=lazy))
    for cycle in cycles:
        print(describe(cycle), file=sys.stderr)
    if cycles:
        print(f"{len(cycles)} {kind} circle(s)", file=sys.stderr)
        return 1
    print(f"no {kind} circle among {len(packages)} packages")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
