"""Run the whole suite as several test sessions side by side: `python -m tests.shards`.

Each shard is one `python -m tests.services` session (its own SeaweedFS, Varnish, registry,
Slurm cluster, queue namespace, cache prefix) with its own test database, over a share of
the test files. The files are dealt out by their recorded durations (tests/durations.json,
seconds per file; a file not listed counts as `DEFAULT_S`), largest first onto the shard
with the least so far. Files that share host-wide state beyond a session (the Podman image
store, the container image built for it) are kept in one shard: `TOGETHER`.

Most of a session's wall time is waiting (servers starting, workers polling, llama.cpp
answering), so on this 2-core machine two sessions finish the suite in less time than one
(docs/benchmarks.md "The test suite"; three finish sooner still, but raise the load enough
to trip timing-sensitive tests: "Three sessions"). Each shard's output goes to its own log
and is printed whole when the shard ends; the exit status is the first failing shard's,
else 0.

`--record LOG`: rewrite tests/durations.json from a pytest log run with `--durations=0`.
Given test paths (an argument naming a file or folder), the run is one session, as before.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DURATIONS = REPO / "tests" / "durations.json"
DEFAULT_S = 5.0
# One shard holds all of these: they share the Podman store and the image pushed into it.
TOGETHER = (
    "tests/containers/",
    "tests/demo/test_demo_registry.py",
    "tests/demo/test_demo_configs.py",
    "tests/pipeline/test_e2e_llamacpp.py",
    "tests/pipeline/test_e2e_vllm.py",
    "tests/pipeline/test_devices.py",
    "tests/slurm/",
    "tests/verification/test_inventory_collect.py",
)
_OUTCOME = re.compile(r"\d+ (?:passed|failed|errors?|skipped|deselected).* in [0-9.]+s")
_PERCENT = re.compile(r"\[\s*(\d+)%\]")
_DURATION_LINE = re.compile(r"^\s*([0-9.]+)s (?:setup|call|teardown)\s+(tests/\S+?\.py)")


def suite_files() -> list[str]:
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py"))


def load_durations() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except FileNotFoundError:
        return {}


def record(log: Path) -> dict[str, float]:
    """Seconds per test file (setup + call + teardown) from a `--durations=0` log."""
    per_file: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        match = _DURATION_LINE.match(line)
        if match:
            seconds, path = float(match.group(1)), match.group(2)
            per_file[path] = per_file.get(path, 0.0) + seconds
    return {path: round(seconds, 1) for path, seconds in sorted(per_file.items())}


def deal(files: list[str], durations: dict[str, float], shards: int) -> list[list[str]]:
    """Files into `shards` lists of about equal recorded time; `TOGETHER` as one unit."""
    together = [f for f in files if f.startswith(TOGETHER)]
    units: list[list[str]] = [[f] for f in files if f not in together]
    if together:
        units.append(together)

    def weight(unit: list[str]) -> float:
        return sum(durations.get(f, DEFAULT_S) for f in unit)

    out: list[list[str]] = [[] for _ in range(shards)]
    loads = [0.0] * shards
    for unit in sorted(units, key=lambda u: (-weight(u), u[0])):
        i = loads.index(min(loads))
        out[i].extend(unit)
        loads[i] += weight(unit)
    return [sorted(files) for files in out if files]


def database_url(base: str, index: int) -> str:
    """The shard's own database (pytest-django creates `test_<name>` from it)."""
    head, _, name = base.rpartition("/")
    return f"{head}/{name}_shard{index}"


@dataclass
class Shard:
    """One running session: its process, its log, when it was launched (wall clock) and the
    file its first test writes its start time to (tests/conftest.py)."""

    index: int
    process: subprocess.Popen[bytes]
    log_path: Path
    launched: float
    first_test_file: Path

    def first_test_wait(self) -> float | None:
        """Seconds from launch to the first test's start, None if no test started."""
        try:
            return float(self.first_test_file.read_text()) - self.launched
        except (OSError, ValueError):
            return None


def run(shards: int, pytest_args: list[str]) -> int:
    groups = deal(suite_files(), load_durations(), shards)
    base_db = os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/agentperf")
    log_dir = REPO / "test-artifacts"
    log_dir.mkdir(exist_ok=True)
    started = time.monotonic()
    running: list[Shard] = []
    for index, files in enumerate(groups):
        first_test_file = log_dir / f"shard-{index}.first-test"
        first_test_file.unlink(missing_ok=True)
        env = dict(
            os.environ,
            TEST_DATABASE_URL=database_url(base_db, index),
            TEST_FIRST_TEST_FILE=str(first_test_file),
            TEST_CPU_FILE=str(log_dir / f"shard-{index}.cpu.json"),
        )
        log_path = log_dir / f"shard-{index}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.services", *pytest_args, *files],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        running.append(Shard(index, process, log_path, time.time(), first_test_file))
        print(f"shard {index}: {len(files)} files, log {log_path.relative_to(REPO)}", flush=True)
    try:
        return _finish(running, started)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: each session stops its own services
        for shard in running:
            if shard.process.poll() is None:
                shard.process.send_signal(signal.SIGINT)
        for shard in running:
            shard.process.wait()
        return 130


def outcome(text: str) -> str:
    """pytest's closing count line in a shard's log (`1 failed, 775 passed ... in 810.04s`)."""
    found = [line.strip(" =") for line in text.splitlines() if _OUTCOME.search(line)]
    return found[-1] if found else "no outcome line (the session did not finish)"


def _progress(log_path: Path) -> str:
    """The last `[ NN%]` pytest printed in a shard's log."""
    try:
        tail = log_path.read_bytes()[-4000:].decode(errors="replace")
    except OSError:
        return "?"
    found = _PERCENT.findall(tail)
    return f"{found[-1]}%" if found else "starting"


def _reap(process: subprocess.Popen[bytes]) -> resource.struct_rusage | None:
    """The shard's resource use if it has ended (its exit status set on `process`), else
    None. `os.wait4` gives the session's CPU time with every process it waited for (its
    servers, workers and engines), which `Popen.poll` would discard."""
    pid, status, usage = os.wait4(process.pid, os.WNOHANG)
    if pid == 0:
        return None
    process.returncode = os.waitstatus_to_exitcode(status)
    return usage


def _finish(running: list[Shard], started: float) -> int:
    """Print each shard's log whole as it ends (in the order they end), a progress line a
    minute while they run, then one summary line per shard: its outcome, how long it waited
    before its first test and its CPU time, and the suite's CPU time in all (docs/benchmarks.md
    "The test suite")."""
    status = 0
    summary: dict[int, str] = {}
    user = system = 0.0
    waiting = list(running)
    last_note = time.monotonic()
    while waiting:
        for shard in list(waiting):
            usage = _reap(shard.process)
            if usage is None:
                continue
            waiting.remove(shard)
            code = shard.process.returncode
            elapsed = time.monotonic() - started
            print(f"\n===== shard {shard.index} (exit {code}, {elapsed:.0f} s) =====", flush=True)
            text = shard.log_path.read_text(errors="replace")
            print(text, flush=True)
            wait = shard.first_test_wait()
            first = f"first test after {wait:.0f} s" if wait is not None else "no test started"
            summary[shard.index] = (
                f"shard {shard.index}: exit {code}; {outcome(text)}; {first}; "
                f"CPU user {usage.ru_utime:.0f} s, system {usage.ru_stime:.0f} s"
            )
            user, system = user + usage.ru_utime, system + usage.ru_stime
            if code and not status:
                status = code
        if waiting:
            if time.monotonic() - last_note >= 60:
                last_note = time.monotonic()
                states = ", ".join(f"shard {s.index} {_progress(s.log_path)}" for s in waiting)
                print(f"{last_note - started:.0f} s: {states}", flush=True)
            time.sleep(2)
    lines = ["", *(summary[i] for i in sorted(summary)), *_cpu_heaviest(running)]
    lines.append(
        f"suite: {time.monotonic() - started:.0f} s wall, CPU user {user:.0f} s, "
        f"system {system:.0f} s (the shards and every process they waited for)"
    )
    print("\n".join(lines), flush=True)
    return status


def _cpu_heaviest(shards: list[Shard], count: int = 12) -> list[str]:
    """The test files that took the most CPU, from each shard's per-file record."""
    per_file: dict[str, float] = {}
    for shard in shards:
        try:
            per_file.update(json.loads(shard.log_path.with_suffix(".cpu.json").read_text()))
        except (OSError, ValueError):
            continue
    heaviest = sorted(per_file.items(), key=lambda kv: -kv[1])[:count]
    if not heaviest:
        return []
    total = sum(per_file.values())
    return [f"CPU by test file ({total:.0f} s in all), heaviest first:"] + [
        f"  {seconds:7.1f} s  {name}" for name, seconds in heaviest
    ]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    if argv[:1] == ["--record"]:
        durations = record(Path(argv[1]))
        DURATIONS.write_text(json.dumps(durations, indent=1, sort_keys=True) + "\n")
        print(f"{len(durations)} files, {sum(durations.values()):.0f} s in all -> {DURATIONS}")
        return 0
    shards = 2
    if argv[:1] == ["--shards"]:
        shards, argv = int(argv[1]), argv[2:]
    named = [a for a in argv if not a.startswith("-") and Path(a.split("::")[0]).exists()]
    if shards <= 1 or named:
        from tests.services import main as one_session

        return one_session(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    return run(shards, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
