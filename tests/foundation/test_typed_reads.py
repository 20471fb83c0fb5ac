"""Results are read as models (issue #37 item 1): outside the model layer no web package reads
a stored result document as a dict. The stored JSON of a Result (its points, brackets and
modelled power), a run (its spec, search summary, progress and host telemetry), a trial (its
metrics, verdicts and telemetry), a verification report (its checks) and a submission's or
ladder rung's deployment config is read through the accessors that parse it once
(``Result.published_points``, ``run.spec``, ``run.summary``, ``trial.summary``,
``trial.tier_verdicts``, ``report.results``, ``submission.deployment``…;
leaderboard/models.py, leaderboard/points.py, runs/models.py, agentperf/contract.py,
submissions/stored_config.py).

The scan walks the AST of every web package and fails on:

- a subscript or ``.get()`` on a stored field (``result.points[0]``,
  ``(trial.metrics or {}).get("ttft_s")``), or on a name bound from one (``for p in
  result.points: p["p25_speed"]``, ``points = list(result.points or [])``), or on a
  parameter that takes a stored document as a dict (``def f(points: list[dict])``, a
  parameter named for a stored field or ``point`` and typed as a dict, a bare list or Any);
- a queryset's ``.values()`` / ``.values_list()`` naming a stored field: the raw document,
  past its accessor (``Trial.objects.values("metrics")``);
- ``json.loads`` / ``orjson.loads`` in the packages that read results (leaderboard, runs,
  review, portal), except the few named below that decode no stored result document.

What it does not follow: a document passed on under a dict key or returned by a function
and read by the caller.

The scanner is checked on small sources first, so a regression in it shows as a failure
here rather than as a scan that finds nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEB_PACKAGES = (
    "catalog",
    "config",
    "core",
    "demo",
    "ladders",
    "leaderboard",
    "portal",
    "review",
    "runs",
    "submissions",
)
# The model layer: where the stored documents are declared and parsed.
MODEL_LAYER = {
    "leaderboard/models.py",
    "leaderboard/points.py",
    "runs/models.py",
    "submissions/models.py",
    "submissions/stored_config.py",
    "ladders/models.py",
}
# Stored JSON fields of Result, BenchmarkRun, Trial, VerificationReport, and the deployment
# config of a Submission or a ladder rung (read as ``submission.deployment``).
STORED = {
    "config",
    "points",
    "brackets",
    "modelled_power",
    "metrics",
    "verdicts",
    "telemetry",
    "run_spec",
    "search_summary",
    "progress",
    "checks",
    "runner_info",
    "qualification",
    "band",
    "quality",
}
# Stored documents travel as dicts in parameters with these names.
STORED_PARAMETERS = STORED | {"point"}
# The packages whose decodes the scan checks: those that store and read results.
DECODING_PACKAGES = ("leaderboard", "portal", "review", "runs")
# (path, function): decodes that parse no stored result document.
DECODES_ALLOWED = {
    ("review/presenters.py", "figure_data"),  # a Plotly figure's own JSON, made just now
    ("leaderboard/export.py", "latest_manifest"),  # the export's manifest, which it wrote
}
LOADS = {("json", "loads"), ("json", "load"), ("orjson", "loads")}
# Calls through which a stored document stays the stored document.
PASS_THROUGH = {"list", "dict", "sorted", "tuple", "iter", "reversed", "enumerate"}
ITEM_METHODS = {"items", "values", "keys"}


@dataclass(frozen=True)
class Read:
    path: str
    line: int
    what: str
    function: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


class _Scope:
    """Names bound, in one function (or the module), to a stored document or a part of it."""

    def __init__(self) -> None:
        self.tainted: set[str] = set()


def _stored_attr(node: ast.AST) -> str | None:
    """The stored field ``node`` reads directly (``x.points``), else None."""
    if isinstance(node, ast.Attribute) and node.attr in STORED:
        return node.attr
    return None


def _untyped_document(annotation: ast.expr | None) -> bool:
    """A parameter's annotation that takes a document as JSON: a dict, a list of dicts or
    Any (a model's name is none of those; an unannotated parameter is not judged)."""
    if annotation is None:
        return False
    text = ast.unparse(annotation)
    return any(word in text for word in ("dict", "Any")) or text in ("list", "Sequence")


class _Scanner(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.reads: list[Read] = []
        self.scopes = [_Scope()]
        self.function = ["<module>"]

    # --- what is a stored document -----------------------------------------------------

    def stored(self, node: ast.AST) -> str | None:
        """The stored field ``node`` evaluates to (or to a part of), else None."""
        if (field := _stored_attr(node)) is not None:
            return field
        if isinstance(node, ast.Name) and node.id in self.scopes[-1].tainted:
            return node.id
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            return next((f for v in node.values if (f := self.stored(v)) is not None), None)
        if isinstance(node, ast.Subscript):
            return self.stored(node.value)
        if isinstance(node, ast.ListComp | ast.GeneratorExp):  # a selection of the documents
            return next(
                (f for g in node.generators if (f := self.stored(g.iter)) is not None), None
            )
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in PASS_THROUGH and node.args:
                return self.stored(node.args[0])
            if isinstance(func, ast.Attribute) and func.attr in ITEM_METHODS | {"get"}:
                return self.stored(func.value)
        return None

    def _bind(self, target: ast.AST) -> None:
        for name in ast.walk(target):
            if isinstance(name, ast.Name):
                self.scopes[-1].tainted.add(name.id)

    # --- scopes ---------------------------------------------------------------------------

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scopes.append(_Scope())
        self.function.append(node.name)
        arguments = node.args
        for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
            if arg.arg in STORED_PARAMETERS and _untyped_document(arg.annotation):
                self.scopes[-1].tainted.add(arg.arg)
        self.generic_visit(node)
        self.function.pop()
        self.scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Lambda(self, node: ast.Lambda) -> None:  # a lambda sees its function's names
        self.generic_visit(node)

    # --- bindings -------------------------------------------------------------------------

    def visit_Assign(self, node: ast.Assign) -> None:
        if self.stored(node.value) is not None:
            for target in node.targets:
                self._bind(target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None and self.stored(node.value) is not None:
            self._bind(node.target)
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        if self.stored(node.value) is not None:
            self._bind(node.target)
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        if self.stored(node.iter) is not None:
            self._bind(node.target)
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        if self.stored(node.iter) is not None:
            self._bind(node.target)
        self.generic_visit(node)

    def _comprehension(self, node: ast.AST) -> None:
        # generators bind before the element is read: visit them first
        for generator in node.generators:  # type: ignore[attr-defined]
            self.visit(generator)
        for field in ("key", "value", "elt"):
            if (child := getattr(node, field, None)) is not None:
                self.visit(child)

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    # --- reads ----------------------------------------------------------------------------

    def _flag(self, node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", 0)
        self.reads.append(Read(self.path, line, what, self.function[-1]))

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and (field := self.stored(node.value)) is not None:
            self._flag(node, f"subscript of stored {field!r}: {ast.unparse(node)[:80]}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr == "get" and (field := self.stored(func.value)) is not None:
                self._flag(node, f".get on stored {field!r}: {ast.unparse(node)[:80]}")
            if func.attr in ("values", "values_list"):
                named = [
                    a.value
                    for a in node.args
                    if isinstance(a, ast.Constant) and isinstance(a.value, str)
                ]
                raw = [n for n in named if n.split("__")[-1] in STORED]
                if raw:
                    self._flag(node, f"queryset .{func.attr}() of stored {raw}")
            owner = func.value
            if (
                isinstance(owner, ast.Name)
                and (owner.id, func.attr) in LOADS
                and self.path.startswith(DECODING_PACKAGES)
                and (self.path, self.function[-1]) not in DECODES_ALLOWED
            ):
                self._flag(node, f"{owner.id}.{func.attr} in {self.function[-1]}()")
        self.generic_visit(node)


def scan_source(source: str, path: str = "runs/x.py") -> list[Read]:
    scanner = _Scanner(path)
    scanner.visit(ast.parse(source))
    return scanner.reads


def web_sources() -> Iterator[tuple[str, str]]:
    for package in WEB_PACKAGES:
        for file in sorted((ROOT / package).rglob("*.py")):
            path = file.relative_to(ROOT).as_posix()
            if "/migrations/" in path or path in MODEL_LAYER:
                continue
            yield path, file.read_text()


# --- the scanner on small sources ------------------------------------------------------------

FLAGGED = {
    "subscript": "def f(result):\n    return result.points[0]\n",
    "get_after_or": "def f(t):\n    return (t.metrics or {}).get('ttft_s')\n",
    "loop_variable": "def f(r):\n    for p in r.points:\n        x = p['p25_speed']\n",
    "comprehension": "def f(r):\n    return [p.get('index') for p in r.points or []]\n",
    "copied_name": "def f(r):\n    pts = list(r.points or [])\n    return pts[-1]['energy']\n",
    "items_loop": "def f(r):\n    for k, b in r.brackets.items():\n        b['flags']\n",
    "values_row": "def f(T):\n    return T.objects.values('index', 'metrics')\n",
    "json_loads": "import json\ndef f(h):\n    return json.loads(h.read())\n",
    "orjson_loads": "import orjson\ndef f(line):\n    return orjson.loads(line)\n",
    "dict_parameter": "def f(points: list[dict]):\n    return [p for p in points][0]['x']\n",
    "point_parameter": "def f(point: dict):\n    return point.get('energy')\n",
    "any_parameter": "def f(metrics: Any):\n    return metrics['ttft_s']\n",
    "config_get": "def f(s):\n    return (s.config or {}).get('engine') or {}\n",
    "config_parameter": "def f(config: dict):\n    return config['topology']['roles']\n",
}
CLEAN = {
    "model_reads": (
        "def f(r, t):\n    return [p.p25_speed for p in r.published_points], t.summary.ttft_s\n"
    ),
    "passed_on": "def f(r):\n    return {'points': r.points}\n",
    "other_dicts": "def f(s):\n    return s['points'], s.get('name')\n",
    "only": "def f(T):\n    return T.objects.only('index', 'metrics')\n",
    "scopes": ("def f(r):\n    p = r.points\n    return len(p)\ndef g(p):\n    return p['name']\n"),
    "model_parameter": (
        "def f(points: list[PublishedPoint], point: PublishedPoint):\n"
        "    return points[0], point.energy\n"
    ),
    "other_package_decode": "import json\ndef f(h):\n    return json.loads(h.read())\n",
    "deployment": "def f(s):\n    return s.deployment.engine.name, s.deployment.topology.used\n",
}


@pytest.mark.parametrize("name", sorted(FLAGGED))
def test_the_scanner_flags_a_dict_read_of_a_stored_document(name: str) -> None:
    assert scan_source(FLAGGED[name]), name


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_the_scanner_passes_reads_through_the_models(name: str) -> None:
    path = "demo/x.py" if name == "other_package_decode" else "runs/x.py"
    assert scan_source(CLEAN[name], path) == [], name


# --- the web packages --------------------------------------------------------------------------


def test_no_web_package_reads_a_stored_result_document_as_a_dict() -> None:
    found = [read for path, source in web_sources() for read in scan_source(source, path)]
    assert found == [], "stored documents read as dicts:\n" + "\n".join(map(str, found))


def test_the_scan_covers_the_readers() -> None:
    """The scan reads the modules that read results (a renamed package would leave it
    scanning nothing)."""
    paths = {path for path, _ in web_sources()}
    assert {"leaderboard/pages/result.py", "runs/timeline.py", "review/presenters.py"} <= paths
