"""Sharded trials: one trial's agents over K load-generator processes (docs/engine.md
"Sharded trials").

A trial of N agents runs as K shards, each its own process and event loop with the agents
``s, s + K, s + 2K, …`` (round robin, so every shard's agents spread over the whole ramp).
An agent's seeds, ramp start and request ids are those it has in a one-process trial of the
same N and seed (``Replay(agent_ids=…)``), so the requests sent are the same whichever K.

The coordinator (``run_sharded_trial``) starts the shards through a ``ShardExecutor`` —
local processes (``LocalShards``) or, across hosts, Celery tasks (``runner.worker.loadgen_hosts``) —
and serves its clock and the common start over UDP (``engine.clocksync``). Each shard loads
the dataset, measures its clock offset, waits for the start instant, runs its agents on the
common warm-up/window/drain schedule, streams its raw records to a JSONL file as they
finish (none held in memory), measures its offset again, and writes a report: agents,
records, client health (CPU, loop lag, first-token stamping delay), offsets, peak memory.
The coordinator merges the raw records (each shifted onto its clock by the shard's
offset) and computes the summary once (``trial.judge_trial``): percentiles are never
merged. A shard that fails, is unhealthy, or whose offset is unsure by more than 1 ms makes
the trial invalid (a failed shard raises ``ShardFailed``; an unhealthy one fails every tier
with the reason), never silently short of agents.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from agentperf.engine import clocksync, rawrecords
from agentperf.engine.clocksync import boot_id, same_kernel
from agentperf.engine.health import monitor_health
from agentperf.engine.loop import quiet_gc, run_real
from agentperf.engine.metrics import (
    NS,
    ClientHealth,
    RequestRecord,
    judge_client_health,
    percentile,
)
from agentperf.engine.replay import Replay
from agentperf.engine.trajectory import Trajectory
from agentperf.engine.transport import Clock, Transport
from agentperf.engine.trial import Tier, TrialConfig, TrialResult, judge_trial, window_marks

START_LEAD_S = 0.25  # from "every shard is ready" to the common start
READY_TIMEOUT_S = 300.0  # a shard loads its dataset and connects within this
REPORT_GRACE_S = 120.0  # after the drain's last possible end, for writing/uploading records
CPU_PER_SHARD = 0.5  # --shards auto keeps each shard at or under half a core
RECORDS_FILE = "records.jsonl"
API_KEY_ENV = "AGENTPERF_SHARD_API_KEY"  # how a local shard gets the endpoint's key
REPORT_FILE = "report.json"


class ShardFailed(RuntimeError):
    """A shard did not finish (killed, crashed, never ready, no report): the trial is
    invalid and the search runs it again."""


def agents_of(concurrency: int, shards: int, shard: int) -> range:
    """The agent ids of shard ``shard`` of ``shards`` (round robin)."""
    return range(shard, concurrency, shards)


@dataclass(slots=True)
class ShardSpec:
    """What one shard needs, as JSON (the API key travels apart: never in a file)."""

    trial_id: str
    shard: int
    shards: int
    config: dict[str, Any]  # TrialConfig.to_dict()
    sync_host: str
    sync_port: int
    sync_token: str  # hex
    base_url: str | None = None
    dataset_path: str | None = None  # local shards read the coordinator's file
    cpus: list[int] | None = None  # pin the shard's process to these cores
    out_dir: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # executor-specific (run, upload)
    # The coordinator's kernel: a shard on the same one shares its clock exactly and takes
    # the start as given, as the merge reads its records (offset 0, `_merge_shard`)
    coordinator_boot_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ShardSpec:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(slots=True)
class ShardOutput:
    """A finished shard: its report and where its raw records are (a local JSONL file)."""

    report: dict[str, Any]
    records_path: Path


class ShardExecutor(Protocol):
    """Starts shards somewhere and hands back their outputs."""

    async def launch(self, specs: Sequence[ShardSpec]) -> None:
        """Start one shard per spec (fills in the executor's own fields of each)."""

    def check(self) -> None:
        """Raise ShardFailed when a shard is known to have failed."""

    async def collect(self, deadline: float) -> list[ShardOutput]:
        """Every shard's output once all finished (``deadline``: time.monotonic())."""
        ...

    def abort(self) -> None:
        """Stop every shard still running (the trial failed or is over)."""


# --------------------------------------------------------------------------- the shard


async def run_shard(
    spec: ShardSpec,
    transport: Transport,
    clock: Clock,
    trajectories: Sequence[Trajectory],
    out_dir: Path,
    finish: Callable[[dict[str, Any], Path], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """One shard's part of the trial (on a real clock); writes records.jsonl and returns
    the report (also written to report.json). ``finish(report, records_path)`` runs before
    the shard tells the coordinator it is done (a remote shard uploads and reports there)."""
    if clock.is_virtual:
        raise ValueError("a sharded trial runs on real time (virtual time is one process)")
    config = TrialConfig.from_dict(spec.config)
    token = bytes.fromhex(spec.sync_token)
    address = (spec.sync_host, spec.sync_port)
    agents = agents_of(config.concurrency, spec.shards, spec.shard)
    out_dir.mkdir(parents=True, exist_ok=True)
    records_path = out_dir / RECORDS_FILE
    count = 0
    with open(records_path, "wb", buffering=1 << 20) as fh:

        def write(record: RequestRecord) -> None:
            nonlocal count
            fh.write(rawrecords.line(record))
            count += 1

        replay = Replay(
            transport,
            clock,
            trajectories,
            config.replay,
            config.concurrency,
            on_record=write,
            agent_ids=agents,
            keep_records=False,
        )
        before, start_coord = await clocksync.measure(
            address, token, spec.shard, wait_for_start=True, timeout_s=READY_TIMEOUT_S
        )
        # on this shard's clock: shifted by the measured offset unless on the same kernel
        start = start_coord - (0 if same_kernel(spec.coordinator_boot_id) else before.offset_ns)
        if clock.now_ns() > start + int(START_LEAD_S * NS):
            # a redelivered shard task, or one that came too late: its agents would start
            # behind the others'; the coordinator's trial fails (no report) and runs again
            raise RuntimeError("shard started after the trial's common start")
        finished = asyncio.Event()
        stopped = clocksync.StopSignal()  # the coordinator abandoned the attempt (or is gone)
        alive = asyncio.ensure_future(
            clocksync.keep_alive(address, token, spec.shard, finished, stopped=stopped)
        )
        w0 = start + int(config.warmup_s * NS)
        w1 = w0 + int(config.duration_s * NS)
        lags: list[float] = []
        cpu: list[float] = []
        stamps: list[float] = []
        cpu0 = time.process_time()
        monitor = asyncio.ensure_future(monitor_health(clock, w0, w1, lags, cpu, stamps))
        try:
            await _unless_stopped(replay.run(stop_sending_at_ns=w1, start_ns=start), stopped)
            await monitor
        except BaseException:
            alive.cancel()
            raise
        finally:
            monitor.cancel()
        cpu_total_s = time.process_time() - cpu0
    try:
        after, _ = await clocksync.measure(address, token, spec.shard, wait_for_start=False)
        report = _report(spec, agents, count, lags, cpu, stamps, cpu_total_s, before, after)
        report["window"] = {"start_ns": w0, "end_ns": w1}  # on this shard's clock
        (out_dir / REPORT_FILE).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
        if finish is not None:
            await finish(report, records_path)
        finished.set()
    finally:
        alive.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await alive
    return report


async def _unless_stopped(work: Awaitable[Any], stopped: clocksync.StopSignal) -> None:
    """Await ``work``; when ``stopped`` is set first, cancel it (every agent and its request
    in flight) and raise ShardStopped: no request of an abandoned attempt is sent after."""
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(stopped.event.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if stopped.event.is_set() and task.cancelled():
        # when it stopped, on the host's monotonic clock (records' clock): nothing of this
        # shard is sent after it
        stopped_ns = time.perf_counter_ns()
        raise clocksync.ShardStopped(f"{stopped.reason}; stopped at {stopped_ns} ns")
    task.result()


def _report(
    spec: ShardSpec,
    agents: range,
    count: int,
    lags: list[float],
    cpu: list[float],
    stamps: list[float],
    cpu_total_s: float,
    before: clocksync.Offset,
    after: clocksync.Offset,
) -> dict[str, Any]:
    return {
        "shard": spec.shard,
        "shards": spec.shards,
        "agents": len(agents),
        "records": count,
        "host": socket.gethostname(),
        "boot_id": boot_id(),
        "pid": os.getpid(),
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "health": {
            "loop_lag_p99_ms": percentile(lags, 99) if lags else None,
            "cpu_percent": cpu[0] if cpu else None,
            "stamp_delay_p99_ms": percentile(stamps, 99) if stamps else None,
        },
        "cpu_s": round(cpu_total_s, 3),
        # ru_maxrss is KiB on Linux
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "clock": {"start": before.to_dict(), "end": after.to_dict()},
    }


def run_shard_here(
    spec: ShardSpec,
    trajectories: Sequence[Trajectory],
    out_dir: Path,
    *,
    api_key: str | None = None,
    finish: Callable[[dict[str, Any], Path], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """One shard in this process on its own uvloop against ``spec.base_url`` (a local
    shard process and a load-generator host's task both run a shard this way)."""
    from agentperf.engine.client import HttpTransport
    from agentperf.engine.transport import RealClock

    if not spec.base_url:
        raise ValueError("a shard needs the endpoint's base URL")
    base_url = spec.base_url
    quiet_gc()

    async def main() -> dict[str, Any]:
        transport = HttpTransport(base_url, api_key=api_key)
        try:
            return await run_shard(
                spec, transport, RealClock(), trajectories, out_dir, finish=finish
            )
        finally:
            await transport.aclose()

    return run_real(main())


# --------------------------------------------------------------------------- local processes


class LocalShards:
    """Shards as child processes of this host: ``python -m agentperf.engine shard``.

    Each child reads its spec from a private file, the dataset from ``dataset_path`` (the
    coordinator's file: the kernel's page cache shares it) and the API key from its
    environment; it is pinned to its own cores where the host has enough of them.
    """

    def __init__(
        self,
        *,
        dataset_path: str | os.PathLike[str],
        api_key: str | None = None,
        work_dir: str | os.PathLike[str] | None = None,
        cpus: Sequence[int] | None = None,
    ) -> None:
        self.dataset_path = str(dataset_path)
        self.api_key = api_key
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="agentperf-shards-"))
        self.cpus = list(cpus) if cpus is not None else _available_cpus()
        self.procs: list[tuple[ShardSpec, asyncio.subprocess.Process, Path]] = []

    def pinning(self, shards: int) -> list[list[int] | None]:
        """Distinct cores per shard where the host has them; else no pinning."""
        if len(self.cpus) < shards:
            return [None] * shards
        per = len(self.cpus) // shards
        return [self.cpus[i * per : (i + 1) * per] for i in range(shards)]

    async def launch(self, specs: Sequence[ShardSpec]) -> None:
        env = dict(os.environ)
        env.pop(API_KEY_ENV, None)
        if self.api_key:
            env[API_KEY_ENV] = self.api_key
        pins = self.pinning(len(specs))
        for spec, cpus in zip(specs, pins, strict=True):
            folder = self.work_dir / spec.trial_id / f"shard-{spec.shard}"
            if folder.exists():
                shutil.rmtree(folder)
            folder.mkdir(parents=True, mode=0o700)
            spec.dataset_path = self.dataset_path
            spec.cpus = cpus
            spec.out_dir = str(folder)
            spec_path = folder / "spec.json"
            spec_path.write_bytes(orjson.dumps(spec.to_dict()))
            stderr = open(folder / "stderr.log", "wb")
            try:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "agentperf.engine",
                    "shard",
                    "--spec",
                    str(spec_path),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=stderr,
                    env=env,
                    start_new_session=True,
                )
            finally:
                stderr.close()
            self.procs.append((spec, proc, folder))

    def check(self) -> None:
        for spec, proc, folder in self.procs:
            if proc.returncode is not None and proc.returncode != 0:
                raise ShardFailed(_exit_reason(spec, proc.returncode, folder))

    async def collect(self, deadline: float) -> list[ShardOutput]:
        outputs: list[ShardOutput] = []
        for spec, proc, folder in self.procs:
            remaining = deadline - time.monotonic()
            try:
                code = await asyncio.wait_for(proc.wait(), max(0.1, remaining))
            except TimeoutError:
                raise ShardFailed(
                    f"shard {spec.shard} (pid {proc.pid}) did not finish in time"
                ) from None
            if code != 0:
                raise ShardFailed(_exit_reason(spec, code, folder))
            report_path = folder / REPORT_FILE
            if not report_path.exists():
                raise ShardFailed(f"shard {spec.shard} (pid {proc.pid}) wrote no report")
            outputs.append(ShardOutput(json.loads(report_path.read_text()), folder / RECORDS_FILE))
        return outputs

    def abort(self) -> None:
        for _spec, proc, _folder in self.procs:
            if proc.returncode is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.procs = []

    def cleanup(self) -> None:
        shutil.rmtree(self.work_dir, ignore_errors=True)


def _exit_reason(spec: ShardSpec, code: int, folder: Path) -> str:
    how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
    tail = ""
    err = folder / "stderr.log"
    if err.exists():
        lines = err.read_text(errors="replace").strip().splitlines()
        tail = f": {lines[-1][:300]}" if lines else ""
    return f"shard {spec.shard} of {spec.shards} {how}{tail}"


def _available_cpus() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


# --------------------------------------------------------------------------- the coordinator


async def run_sharded_trial(
    executor: ShardExecutor,
    clock: Clock,
    config: TrialConfig,
    tiers: Sequence[Tier],
    *,
    shards: int,
    trial_id: str,
    base_url: str | None,
    sync_host: str = "127.0.0.1",
    on_window: Callable[[str, int], None] | None = None,
    extra: dict[str, Any] | None = None,
    trajectory_turns: dict[str, int] | None = None,
    trajectories: Sequence[Trajectory] | None = None,
) -> TrialResult:
    """Run one trial as ``shards`` shards through ``executor`` and judge the merged records.
    ``trajectory_turns`` (trajectory id → its turn count, the coordinator's dataset) lets the
    judge count a whole-task session that ended its trajectory as one process would
    (docs/engine.md "Session SLOs"); with ``trajectories`` (the same dataset) it sums the
    trial's cache truth (docs/metrics.md "Cache truth").

    Raises ShardFailed when a shard does not finish; an unhealthy shard (or a clock offset
    less sure than 1 ms) makes the trial's client unhealthy, which fails every tier."""
    if clock.is_virtual:
        raise ValueError("a sharded trial runs on real time (virtual time is one process)")
    if not 1 <= shards <= config.concurrency:
        raise ValueError(f"shards must be in [1, N={config.concurrency}], got {shards}")
    sync = clocksync.SyncServer(shards, host=sync_host).start()
    specs = [
        ShardSpec(
            trial_id=trial_id,
            shard=s,
            shards=shards,
            config=config.to_dict(),
            sync_host=sync.address[0],
            sync_port=sync.address[1],
            sync_token=sync.token.hex(),
            base_url=base_url,
            extra=dict(extra or {}),
            coordinator_boot_id=boot_id(),
        )
        for s in range(shards)
    ]
    marks: asyncio.Future[None] | None = None
    try:
        await executor.launch(specs)
        await _all_ready(executor, sync, shards)
        start = clock.now_ns() + int(START_LEAD_S * NS)
        sync.set_start(start)
        w0 = start + int(config.warmup_s * NS)
        w1 = w0 + int(config.duration_s * NS)
        if on_window is not None:
            marks = asyncio.ensure_future(window_marks(clock, w0, w1, on_window))
        drain_s = config.replay.timeout_s
        deadline = time.monotonic() + (w1 - clock.now_ns()) / NS + drain_s + REPORT_GRACE_S
        outputs = await _collect_checking(executor, deadline, sync)
        if marks is not None:
            await marks
    finally:
        if marks is not None:
            marks.cancel()
        # Every shard still running stops at its next keep-alive (docs/engine.md "Sharded
        # trials"); the server closes itself after answering STOP for a while.
        sync.stop_shards()
        executor.abort()
    records, load_generator, health = merge_outputs(outputs, config)
    return judge_trial(
        records,
        config,
        tiers,
        window=(w0, w1),
        client=health,
        simulated=False,
        load_generator=load_generator,
        trajectory_turns=trajectory_turns,
        trajectories=trajectories,
    )


async def _all_ready(executor: ShardExecutor, sync: clocksync.SyncServer, shards: int) -> None:
    """Every shard has checked in (a shard lost on the way fails the trial at once)."""
    ready_by = time.monotonic() + READY_TIMEOUT_S
    while not sync.wait_ready(0):
        executor.check()
        _check_silent(sync)
        if time.monotonic() > ready_by:
            missing = sorted(set(range(shards)) - sync.ready)
            raise ShardFailed(f"shards {missing} not ready within {READY_TIMEOUT_S:g} s")
        await asyncio.sleep(0.02)


def _check_silent(sync: clocksync.SyncServer) -> None:
    lost = sync.silent(clocksync.SILENT_S)
    if lost:
        raise ShardFailed(
            f"shards {lost} fell silent for {clocksync.SILENT_S:g} s (process or host lost)"
        )


async def _collect_checking(
    executor: ShardExecutor, deadline: float, sync: clocksync.SyncServer
) -> list[ShardOutput]:
    collecting = asyncio.ensure_future(executor.collect(deadline))
    try:
        while not collecting.done():
            executor.check()
            _check_silent(sync)
            await asyncio.wait([collecting], timeout=0.1)
        return collecting.result()
    finally:
        collecting.cancel()


def read_records(path: Path, offset_ns: int = 0) -> Iterator[RequestRecord]:
    """A shard's records, shifted by ``offset_ns`` onto the coordinator's clock."""
    for record in rawrecords.iter_file(path):
        if offset_ns:
            record.t_send_ns += offset_ns
            for name in ("t_first_ns", "t_last_ns", "t_end_ns"):
                value = getattr(record, name)
                if value is not None:
                    setattr(record, name, value + offset_ns)
        yield record


def _shard_problems(rep: dict[str, Any], config: TrialConfig) -> tuple[list[str], int, int]:
    """What makes one shard's measurement unsure (its client health, its clock offset's
    uncertainty or drift over 1 ms), with that uncertainty and drift in ns."""
    h = rep.get("health") or {}
    judged = judge_client_health(
        h.get("loop_lag_p99_ms"),
        h.get("cpu_percent"),
        h.get("stamp_delay_p99_ms"),
        max_loop_lag_ms=config.max_loop_lag_ms,
        max_cpu_percent=config.max_cpu_percent,
    )
    problems = [judged.reason] if not judged.healthy else []
    start, end = rep["clock"]["start"], rep["clock"]["end"]
    uncertainty = max(int(start["uncertainty_ns"]), int(end["uncertainty_ns"]))
    drift = abs(int(end["offset_ns"]) - int(start["offset_ns"]))
    if uncertainty > clocksync.MAX_UNCERTAINTY_NS:
        problems.append(f"clock offset uncertain by {uncertainty / 1e6:.2f} ms > 1 ms")
    if drift > clocksync.MAX_UNCERTAINTY_NS:
        problems.append(f"clock drifted {drift / 1e6:.2f} ms during the trial > 1 ms")
    return problems, uncertainty, drift


def _merge_shard(
    out: ShardOutput, config: TrialConfig, records: list[RequestRecord]
) -> tuple[dict[str, Any], list[str]]:
    """One shard's records added to ``records`` on the coordinator's clock; its row of the
    load-generator section and the reasons it makes the trial unhealthy."""
    rep = out.report
    s = int(rep["shard"])
    problems, uncertainty, drift = _shard_problems(rep, config)
    reasons = [f"shard {s}: {p}" for p in problems]
    # Same kernel: the same monotonic clock, so the offset is exactly 0 and the probe's
    # few-microsecond estimate would only add its error.
    same_clock = same_kernel(rep.get("boot_id"))
    measured = int(rep["clock"]["start"]["offset_ns"])
    offset = 0 if same_clock else measured
    before = len(records)
    records.extend(read_records(out.records_path, offset))
    if len(records) - before != int(rep["records"]):
        reasons.append(
            f"shard {s}: {len(records) - before} records read, {rep['records']} reported"
        )
    row = {
        "shard": s,
        "host": rep.get("host"),
        "agents": int(rep["agents"]),
        "records": int(rep["records"]),
        "health": rep.get("health") or {},
        "healthy": not problems,
        "problems": problems,
        "cpu_s": rep.get("cpu_s"),
        "peak_rss_mib": rep.get("peak_rss_mib"),
        "cpus": rep.get("cpus"),
        "clock_offset_ns": offset,
        "clock_measured_offset_ns": measured,
        "same_clock": same_clock,
        "clock_uncertainty_ns": uncertainty,
        "clock_drift_ns": drift,
    }
    return row, reasons


def merge_outputs(
    outputs: Sequence[ShardOutput], config: TrialConfig
) -> tuple[list[RequestRecord], dict[str, Any], ClientHealth]:
    """The union of the shards' records on the coordinator's clock, the load-generator
    section of the trial (per shard: agents, records, health, offsets) and the client
    health of the whole trial (unhealthy when any shard is, or any offset is unsure)."""
    records: list[RequestRecord] = []
    per_shard: list[dict[str, Any]] = []
    reasons: list[str] = []
    for out in sorted(outputs, key=lambda o: int(o.report["shard"])):
        row, shard_reasons = _merge_shard(out, config, records)
        per_shard.append(row)
        reasons.extend(shard_reasons)
    worst = {  # the worst figure of any shard
        key: max((v for p in per_shard if (v := p["health"].get(key)) is not None), default=None)
        for key in ("loop_lag_p99_ms", "cpu_percent", "stamp_delay_p99_ms")
    }
    agents = sum(p["agents"] for p in per_shard)
    if agents != config.concurrency:
        reasons.append(f"shards ran {agents} agents, the trial has {config.concurrency}")
    health = ClientHealth(
        loop_lag_p99_ms=worst["loop_lag_p99_ms"],
        cpu_percent=worst["cpu_percent"],
        healthy=not reasons,
        reason="; ".join(reasons),
        stamp_delay_p99_ms=worst["stamp_delay_p99_ms"],
    )
    section = {
        "shards": len(per_shard),
        "per_shard": per_shard,
        "max_clock_uncertainty_ns": max((p["clock_uncertainty_ns"] for p in per_shard), default=0),
        "healthy": not reasons,
        "reasons": reasons,
    }
    records.sort(key=lambda r: r.t_send_ns)
    return records, section, health


# --------------------------------------------------------------------------- --shards auto


def auto_shards(
    concurrency: int,
    fastest_speed: float,
    ceiling_events_per_core_s: float,
    *,
    cpu_per_shard: float = CPU_PER_SHARD,
    max_shards: int | None = None,
) -> int:
    """Shards for N agents streaming at ``fastest_speed`` tok/s each (one event per token,
    the worst case), at most ``cpu_per_shard`` of a core each at the measured ceiling."""
    if ceiling_events_per_core_s <= 0:
        raise ValueError("the client ceiling must be > 0 events per core-second")
    events = concurrency * max(fastest_speed, 1.0)
    k = max(1, math.ceil(events / (ceiling_events_per_core_s * cpu_per_shard)))
    k = min(k, concurrency)
    if max_shards is not None:
        k = min(k, max(1, max_shards))
    return k


@dataclass(slots=True)
class Sharding:
    """How a search or trial shards its load: ``shards`` per trial (None: ``--shards auto``
    from ``fastest_speed`` and the measured ``ceiling``), and a factory of executors."""

    executor: Callable[[], ShardExecutor]
    shards: int | None = 1
    fastest_speed: float = 0.0
    ceiling_events_per_core_s: float | None = None
    max_shards: int | None = None
    sync_host: str = "127.0.0.1"
    max_attempts: int = 3  # a trial whose shard failed is run again, up to this many times
    # Run even a one-shard trial in a shard process (a benchmark measuring one shard as it
    # runs in a sharded trial: records streamed to disk, its own process's memory)
    always: bool = False

    def shards_for(self, concurrency: int) -> int:
        if self.shards is not None:
            return max(1, min(self.shards, concurrency))
        if self.ceiling_events_per_core_s is None:
            raise ValueError("--shards auto needs the client ceiling (calibrate-client)")
        return auto_shards(
            concurrency,
            self.fastest_speed,
            self.ceiling_events_per_core_s,
            max_shards=self.max_shards,
        )
