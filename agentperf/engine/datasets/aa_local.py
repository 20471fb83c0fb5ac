"""Importer for the AA-AgentPerf local replay format (PyPI ``agentperf-local``).

The format, as shipped in ``agentperf_local/data/replays/<replay>/`` of agentperf-local
0.3.4: a ``manifest*.json`` (``name``, ``source``, ``mode``, ``version`` and ``tasks``, each
with ``task_id``, ``trace``, ``model_calls``, ``tool_calls``,
``total_recorded_tool_delay_ms``, ``family``, ``adapter``, ``required_context_tokens``,
optional ``tool_environment``) and one JSONL trace per task with one row per model call:
the full recorded request ``messages`` and ``tools``, ``target_output_tokens`` (optional
``max_output_tokens``), ``recorded_prompt_tokens`` / ``_completion_tokens`` /
``_total_tokens`` / ``recorded_model_duration_ms``, ``simulated_tool_delay_ms_after``,
``recorded_tool_calls_after`` and ``source`` provenance.

Mapping (lossless: ``export_rows`` rebuilds every row exactly, which the tests check):

- one trajectory per task; turn *k* keeps the longest common message prefix of rows *k-1*
  and *k* and appends the rest, so ``prompt(k)`` equals row *k*'s ``messages`` (the SWE
  traces end each request with an ephemeral "Tool-call turn i of 100" message that the next
  row drops; that is expressed by ``keep_messages``);
- trajectory ``tools`` are row 0's; a row whose tools differ overrides them on its turn;
- ``target_output_tokens`` is the row's target, else ``max_output_tokens``, else the
  recorded completion tokens, else 256, and at least 1;
- ``tool_delay_s`` = ``simulated_tool_delay_ms_after`` / 1000;
- every other row field is kept verbatim in ``turn.metadata["aa_row"]`` and the manifest
  task entry in ``trajectory.metadata["aa_task"]``.

The package needs Python >= 3.12, so it is never installed: ``fetch_wheel`` downloads the
wheel with pip into the cache directory and the traces are read from the zip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from agentperf.engine.tokens import TokenCounter
from agentperf.engine.trajectory import (
    Dataset,
    DatasetError,
    Trajectory,
    Turn,
    turns_from_prompts,
)

PACKAGE = "agentperf-local"
PACKAGE_VERSION = "0.3.4"
REPLAYS_PREFIX = "agentperf_local/data/replays/"
DEFAULT_TARGET_OUTPUT_TOKENS = 256
_ROW_KEYS_IN_TURN = ("messages", "tools")


def cache_dir() -> Path:
    """``$AGENTPERF_CACHE``, else ``~/.cache/agentperf``."""
    env = os.environ.get("AGENTPERF_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "agentperf"


def fetch_wheel(directory: Path | None = None, *, version: str = PACKAGE_VERSION) -> Path:
    """The agentperf-local wheel, downloaded with pip into the cache on first use."""
    target = (directory or cache_dir()) / "wheels"
    pattern = f"agentperf_local-{version}-*.whl"
    found = sorted(target.glob(pattern))
    if found:
        return found[0]
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            f"{PACKAGE}=={version}",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
            "--disable-pip-version-check",
            "-q",
            "-d",
            str(target),
        ],
        check=True,
    )
    found = sorted(target.glob(pattern))
    if not found:
        raise FileNotFoundError(f"pip did not leave {pattern} in {target}")
    return found[0]


class _Tree:
    """Read-only view of a replays folder, inside a wheel (zip) or on disk."""

    def __init__(self, src: Path) -> None:
        self._zip: zipfile.ZipFile | None = None
        self._root = src
        self._prefix = ""
        if src.is_file() and zipfile.is_zipfile(src):
            self._zip = zipfile.ZipFile(src)
            self._prefix = REPLAYS_PREFIX
        elif not src.is_dir():
            raise DatasetError(f"{src}: not a wheel/zip or a folder")

    def read(self, rel: str) -> bytes:
        if self._zip is not None:
            return self._zip.read(self._prefix + rel)
        return (self._root / rel).read_bytes()

    def files(self) -> list[str]:
        if self._zip is not None:
            n = len(self._prefix)
            return sorted(
                i.filename[n:]
                for i in self._zip.infolist()
                if i.filename.startswith(self._prefix) and not i.is_dir()
            )
        return sorted(p.relative_to(self._root).as_posix() for p in self._root.rglob("*.json*"))

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()


def _pick_manifests(files: list[str]) -> dict[str, str]:
    """replay folder -> manifest path; ``manifest.json`` first, then the x86_64 one.

    The bundled arm64 and x86_64 manifests differ only in the Docker image of the tool
    environment, which a replay does not use.
    """
    by_folder: dict[str, list[str]] = {}
    for f in files:
        p = PurePosixPath(f)
        if p.name.startswith("manifest") and p.suffix == ".json":
            by_folder.setdefault(str(p.parent), []).append(f)
    chosen: dict[str, str] = {}
    for folder, manifests in sorted(by_folder.items()):
        names = {PurePosixPath(m).name: m for m in manifests}
        for preferred in ("manifest.json", "manifest-x86_64.json"):
            if preferred in names:
                chosen[folder] = names[preferred]
                break
        else:
            chosen[folder] = sorted(manifests)[0]
    return chosen


def iter_traces(
    src: Path,
) -> Iterator[tuple[str, dict[str, Any], dict[str, Any], list[dict[str, Any]]]]:
    """(replay folder, manifest, manifest task, rows) for every task under ``src``."""
    tree = _Tree(src)
    try:
        for folder, manifest_path in _pick_manifests(tree.files()).items():
            manifest = json.loads(tree.read(manifest_path))
            for task in manifest.get("tasks", []):
                rel = str(PurePosixPath(folder) / task["trace"]) if folder != "." else task["trace"]
                rows = [
                    json.loads(line)
                    for line in tree.read(rel).decode("utf-8").splitlines()
                    if line.strip()
                ]
                manifest_meta = {k: v for k, v in manifest.items() if k != "tasks"}
                manifest_meta["manifest_file"] = PurePosixPath(manifest_path).name
                yield folder, manifest_meta, task, rows
    finally:
        tree.close()


def _target(row: dict[str, Any]) -> int:
    for key in ("target_output_tokens", "max_output_tokens", "recorded_completion_tokens"):
        value = row.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return DEFAULT_TARGET_OUTPUT_TOKENS


def trajectory_from_rows(
    rows: list[dict[str, Any]],
    *,
    trajectory_id: str,
    metadata: dict[str, Any],
    counter: TokenCounter | None = None,
) -> Trajectory:
    """One task's rows (sorted by ``conversation_idx``) as a trajectory."""
    if not rows:
        raise DatasetError(f"{trajectory_id}: empty trace")
    rows = sorted(rows, key=lambda r: int(r.get("conversation_idx", 0)))
    base = turns_from_prompts(
        [r["messages"] for r in rows],
        target_output_tokens=[_target(r) for r in rows],
        tool_delays_s=[float(r.get("simulated_tool_delay_ms_after", 0.0)) / 1000 for r in rows],
        recorded_prompt_tokens=[r.get("recorded_prompt_tokens") for r in rows],
    )
    tools = tuple(rows[0].get("tools") or ())
    turns: list[Turn] = []
    for row, turn in zip(rows, base, strict=True):
        row_tools = tuple(row.get("tools") or ())
        turns.append(
            Turn(
                keep_messages=turn.keep_messages,
                new_messages=turn.new_messages,
                target_output_tokens=turn.target_output_tokens,
                tool_delay_s=turn.tool_delay_s,
                recorded_prompt_tokens=turn.recorded_prompt_tokens,
                recorded_cached_tokens=None,
                tools=None if row_tools == tools else row_tools,
                message_tokens=(
                    counter.count_messages(turn.new_messages) if counter is not None else None
                ),
                metadata={"aa_row": {k: v for k, v in row.items() if k not in _ROW_KEYS_IN_TURN}},
            )
        )
    return Trajectory(id=trajectory_id, turns=tuple(turns), tools=tools, metadata=metadata)


def export_rows(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The AA trace rows an imported trajectory came from (the inverse of the import)."""
    rows: list[dict[str, Any]] = []
    for k, prompt in enumerate(trajectory.iter_prompts()):
        turn = trajectory.turns[k]
        row = dict(turn.metadata.get("aa_row", {}))
        row["messages"] = prompt
        row["tools"] = list(trajectory.tools_for(k))
        rows.append(row)
    return rows


def _swebench_repos(src: Path) -> dict[str, str]:
    tree = _Tree(src)
    repos: dict[str, str] = {}
    try:
        for f in tree.files():
            if PurePosixPath(f).name == "swebench-instances.jsonl":
                for line in tree.read(f).decode("utf-8").splitlines():
                    if line.strip():
                        item = json.loads(line)
                        repos[item["instance_id"]] = item["repo"]
    finally:
        tree.close()
    return repos


def import_aa_local(
    src: str | os.PathLike[str],
    *,
    replays: list[str] | None = None,
    counter: TokenCounter | None = None,
    name: str = "aa-agentperf-local",
    version: str | None = None,
) -> Dataset:
    """Every task of every replay set in ``src`` (the wheel, or a ``replays`` folder).

    ``replays`` limits the import to those replay folders (e.g. ``["aa-mini-v1"]``).
    """
    path = Path(src)
    repos = _swebench_repos(path)
    trajectories: list[Trajectory] = []
    replay_meta: dict[str, Any] = {}
    for folder, manifest, task, rows in iter_traces(path):
        if replays is not None and folder not in replays:
            continue
        replay_meta[folder] = manifest
        source = rows[0].get("source") or {}
        metadata: dict[str, Any] = {
            "source": f"{PACKAGE}=={PACKAGE_VERSION}:{folder}/{task['trace']}",
            "replay": folder,
            "task_id": task["task_id"],
            "aa_task": task,
            "family": task.get("family") or source.get("family"),
        }
        if task["task_id"] in repos:
            metadata["repo"] = repos[task["task_id"]]
            metadata["language"] = "python"  # every bundled SWE-bench task is a Python repo
        trajectories.append(
            trajectory_from_rows(
                rows,
                trajectory_id=f"{folder}/{task['task_id']}",
                metadata=metadata,
                counter=counter,
            )
        )
    if not trajectories:
        raise DatasetError(f"{src}: no AA replay traces found")
    version = version if version is not None else PACKAGE_VERSION
    return Dataset(
        name=name,
        version=version,
        trajectories=tuple(trajectories),
        metadata={
            "importer": "aa-local",
            "package": f"{PACKAGE}=={PACKAGE_VERSION}",
            "replays": replay_meta,
        },
    )
