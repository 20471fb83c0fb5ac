"""Entry points that put the pieces together: one trial, or a whole SLO-tier search.

These are what the CLI and the Celery task call. They are synchronous (they own their event
loop: uvloop on a real clock; an in-process target such as ``sim:PROFILE`` runs its own, the
simulator's virtual-time loop: ``agentperf.engine.targets``)::

    from agentperf.engine.jobs import Target, search_job
    result = search_job(
        target=Target(base_url="http://10.0.0.5:8000/v1"),   # or Target.parse("sim:...")
        trajectories=dataset.trajectories,
        tiers=tiers,                                          # list[trial.Tier]
        base=TrialConfig(concurrency=1, warmup_s=30, duration_s=120, accelerators=8,
                         replay=ReplayConfig(model="deepseek-v4")),
        cap=1024,
        out_dir="/tmp/run-42",            # optional: trials/<k>-n<N>/{trial,requests}.json[l]
        prior_trials=stored_trials,       # list of SearchTrial.to_dict() already stored
        on_trial=store_trial,             # called with each finished SearchTrial
        progress=report,                  # (phase, trial index, concurrency)
    )
"""

from __future__ import annotations

import dataclasses
import os
import socket
import traceback
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from agentperf.engine import targets
from agentperf.engine.loop import quiet_gc, run_real
from agentperf.engine.meanfield import MeanField, check_mean_field, slice_trial
from agentperf.engine.openloop import auto_rate_step, open_trial_config
from agentperf.engine.replay import ARRIVAL_OPEN
from agentperf.engine.search import (
    OnTrial,
    Progress,
    SearchResult,
    SearchTrial,
    TrialOutcome,
    run_search,
)
from agentperf.engine.sharding import ShardFailed, Sharding, run_sharded_trial
from agentperf.engine.trajectory import Trajectory
from agentperf.engine.transport import Clock, RealClock, Transport
from agentperf.engine.trial import Tier, TrialConfig, TrialResult, run_trial, write_trial

T = TypeVar("T")
OnTrialResult = Callable[[TrialResult], None]
# (trial index, attempt, reason): an attempt of a sharded trial failed and is run again
OnAttemptFailed = Callable[[int, int, str], None]


@dataclass(slots=True)
class Target:
    """Where the requests go: an OpenAI-compatible base URL, or the address ``SCHEME:SPEC``
    of an in-process target served by the runner registered for SCHEME
    (``agentperf.engine.targets``; ``sim:PROFILE`` is the simulator on virtual time)."""

    base_url: str | None = None
    # The PROFILE of the address sim:PROFILE (the simulator's scheme); either sets the other.
    sim_profile: str | None = None
    api_key: str | None = None
    seed: int = 0
    # Opens the TCP connection to (host, port) when the server is not on this host's network
    # (a sandboxed server: docs/security.md "Sandbox"); None is plain TCP.
    connect: Callable[[str, int, float | None], socket.socket] | None = None
    address: str | None = None

    def __post_init__(self) -> None:
        sim = f"{targets.SIM_SCHEME}:"
        if self.sim_profile is not None:
            if self.address not in (None, sim + self.sim_profile):
                raise ValueError(f"a target is sim:{self.sim_profile} or {self.address}, not both")
            self.address = sim + self.sim_profile
        elif self.address is not None and self.address.startswith(sim):
            self.sim_profile = self.address[len(sim) :]

    @classmethod
    def parse(cls, text: str, *, api_key: str | None = None, seed: int = 0) -> Target:
        """A base URL, or ``SCHEME:SPEC`` of a registered scheme (UnknownTarget names an
        unknown one)."""
        parts = targets.split_address(text)
        if parts is None:
            return cls(base_url=text, api_key=api_key, seed=seed)
        targets.runner_for(parts[0])
        return cls(address=text, seed=seed)

    @property
    def simulated(self) -> bool:
        """An in-process target (its runner provides the clock), not a real endpoint."""
        return self.address is not None


def run_on_target(target: Target, main: Callable[[Transport, Clock], Awaitable[T]]) -> T:
    """Run ``main(transport, clock)`` against ``target`` and return its result."""
    if target.address is None and not target.base_url:
        raise ValueError("a target needs a base URL or a SCHEME:SPEC address (sim:PROFILE)")
    runner = None if target.address is None else targets.resolve(target.address)
    # Real clock: no collector pauses in the timestamps. Virtual time: less CPU, since the
    # heap (records, cache keys) only grows during a run.
    quiet_gc()
    if runner is not None:
        serve, spec = runner
        return serve(spec, main, seed=target.seed)
    base_url = target.base_url
    assert base_url is not None

    async def real() -> T:
        from agentperf.engine.client import HttpTransport

        transport = HttpTransport(base_url, api_key=target.api_key, connect=target.connect)
        try:
            return await main(transport, RealClock())
        finally:
            await transport.aclose()

    return run_real(real())


def trial_job(
    *,
    target: Target,
    trajectories: Sequence[Trajectory],
    config: TrialConfig,
    tiers: Sequence[Tier] = (),
    out_dir: str | os.PathLike[str] | None = None,
    sharding: Sharding | None = None,
    mean_field: MeanField | None = None,
) -> TrialResult:
    """One trial; writes DIR/trial.json and DIR/requests.jsonl when ``out_dir`` is given.
    With ``sharding`` of more than one shard, its agents run in shard processes; with
    ``mean_field`` on a simulated target, on a slice of the deployment (engine.meanfield)."""
    check_mean_field(mean_field, simulated=target.simulated, arrival=config.replay.arrival)

    async def main(transport: Transport, clock: Clock) -> TrialResult:
        served, sliced, record = slice_trial(
            transport, config, mean_field, virtual=clock.is_virtual
        )
        result, _ = await _one_trial(
            served, clock, target, trajectories, sliced, tiers, sharding, index=0
        )
        result.mean_field = record
        return result

    result = run_on_target(target, main)
    if out_dir is not None:
        write_trial(out_dir, result)
    return result


async def _one_trial(
    transport: Transport,
    clock: Clock,
    target: Target,
    trajectories: Sequence[Trajectory],
    config: TrialConfig,
    tiers: Sequence[Tier],
    sharding: Sharding | None,
    *,
    index: int,
    on_window: Callable[[str, int], None] | None = None,
    on_attempt_failed: OnAttemptFailed | None = None,
) -> tuple[TrialResult, list[dict[str, Any]]]:
    """One trial in this process, or sharded; a sharded attempt whose shard failed is run
    again (fresh cache namespaces), up to ``sharding.max_attempts``. Returns the result and
    the failed attempts (``{"attempt", "reason"}``)."""
    shards = 1 if sharding is None else sharding.shards_for(config.concurrency)
    if sharding is None or (shards <= 1 and not sharding.always):
        result = await run_trial(transport, clock, trajectories, config, tiers, on_window=on_window)
        return result, []
    if clock.is_virtual:
        raise ValueError("sharded trials need a real endpoint (virtual time is one process)")
    failed: list[dict[str, Any]] = []
    for attempt in range(1, sharding.max_attempts + 1):
        attempt_config = config
        if attempt > 1:
            replay = dataclasses.replace(
                config.replay, namespace_salt=f"{config.replay.namespace_salt}a{attempt}"
            )
            attempt_config = dataclasses.replace(config, replay=replay)
        try:
            result = await run_sharded_trial(
                sharding.executor(),
                clock,
                attempt_config,
                tiers,
                shards=shards,
                trial_id=f"t{index}a{attempt}",
                base_url=target.base_url,
                sync_host=sharding.sync_host,
                on_window=on_window,
                trajectory_turns={t.id: len(t.turns) for t in trajectories},
                trajectories=trajectories,
            )
        except ShardFailed as exc:
            failed.append({"attempt": attempt, "reason": str(exc)})
            if on_attempt_failed is not None:
                on_attempt_failed(index, attempt, str(exc))
            continue
        if failed:
            result.load_generator["failed_attempts"] = failed
        return result, failed
    reasons = "; ".join(f"attempt {f['attempt']}: {f['reason']}" for f in failed)
    raise ShardFailed(f"trial {index} (N={config.concurrency}) failed every attempt: {reasons}")


class TrialWriter:
    """Writes a search's trial files (``write_trial``). With ``background``, each trial's
    files are written by a forked child process while the search goes on with the next
    trial: the same function on the same records (a copy-on-write snapshot), so the same
    bytes; one child at a time, and ``wait`` before anything reads the files. Used on
    virtual time only, where no measurement's timestamps can feel the second process
    (docs/benchmarks.md "Rack scale in under five minutes")."""

    def __init__(self, *, background: bool) -> None:
        self.background = background and hasattr(os, "fork")
        self._child: tuple[int, Path] | None = None

    def write(self, folder: Path, result: TrialResult) -> None:
        if not self.background:
            write_trial(folder, result)
            return
        self.wait()
        pid = os.fork()
        if pid == 0:  # the child: write, and leave without running the parent's cleanup
            code = 1
            try:
                write_trial(folder, result)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        self._child = (pid, folder)

    def wait(self) -> None:
        """Wait for the child writing the last trial; raise if it failed."""
        if self._child is None:
            return
        pid, folder = self._child
        self._child = None
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"writing the trial files of {folder} failed (see stderr)")


def trial_dir(out_dir: str | os.PathLike[str], index: int, concurrency: int) -> Path:
    return Path(out_dir) / "trials" / f"{index:03d}-n{concurrency}"


def config_for_trial(base: TrialConfig, concurrency: int, index: int) -> TrialConfig:
    """The settings of trial ``index`` of a search: ``base`` at ``concurrency``, with cache
    namespaces salted by the trial index so one trial never warms the next."""
    replay = dataclasses.replace(
        base.replay, namespace_salt=f"{base.replay.namespace_salt}t{index}"
    )
    return dataclasses.replace(base, concurrency=concurrency, replay=replay)


def search_job(
    *,
    target: Target,
    trajectories: Sequence[Trajectory],
    tiers: Sequence[Tier],
    base: TrialConfig,
    cap: int = 1024,
    out_dir: str | os.PathLike[str] | None = None,
    prior_trials: Iterable[SearchTrial | dict[str, Any]] = (),
    on_trial: OnTrial | None = None,
    on_trial_result: OnTrialResult | None = None,
    progress: Progress | None = None,
    max_trials: int = 60,
    on_window: Callable[[int, str, int, Transport], None] | None = None,
    sharding: Sharding | None = None,
    on_attempt_failed: OnAttemptFailed | None = None,
    rate_step: float | None = None,
    mean_field: MeanField | None = None,
) -> SearchResult:
    """The whole SLO-tier search; ``base`` gives every trial's settings but concurrency.

    With ``base.replay.arrival == "open"`` the search point n is the arrival rate
    ``n * rate_step`` sessions per minute (default ``auto_rate_step``) and ``cap`` is in
    steps (``agentperf.engine.openloop``; summarize with ``open_loop_summary``).

    Each finished trial's summary and verdicts are in ``SearchTrial.data`` (what
    ``on_trial`` receives and what ``prior_trials`` takes back); ``on_trial_result``
    additionally gets the full TrialResult with raw records (for uploading them).
    ``on_window(trial index, "start"|"end", t_ns, transport)`` marks each trial's
    measurement window (scrape /metrics there; it must not block). ``sharding`` runs each
    trial's agents in shard processes (docs/engine.md "Sharded trials"); a trial whose
    shard failed is reported to ``on_attempt_failed`` and run again under the same index.
    ``mean_field`` runs each large enough trial on a slice of a simulated deployment
    (``agentperf.engine.meanfield``; an approximation, recorded in each such trial).
    """
    check_mean_field(mean_field, simulated=target.simulated, arrival=base.replay.arrival)
    step = rate_step
    if step is None and base.replay.arrival == ARRIVAL_OPEN:
        step = auto_rate_step(trajectories, base.duration_s, base.min_requests)
    trials = _SearchTrials(
        target=target,
        trajectories=trajectories,
        tiers=tiers,
        base=base,
        rate_step=step,
        out_dir=out_dir,
        on_trial_result=on_trial_result,
        on_window=on_window,
        sharding=sharding,
        on_attempt_failed=on_attempt_failed,
        mean_field=mean_field,
    )

    async def main(transport: Transport, clock: Clock) -> SearchResult:
        writer = TrialWriter(background=clock.is_virtual)

        async def execute(n: int, phase: str, index: int) -> TrialOutcome:
            return await trials.run(transport, clock, writer, n, index)

        try:
            return await run_search(
                execute,
                [t.name for t in tiers],
                cap=cap,
                prior_trials=prior_trials,
                on_trial=on_trial,
                progress=progress,
                max_trials=max_trials,
            )
        finally:
            writer.wait()

    return run_on_target(target, main)


@dataclass(slots=True)
class _SearchTrials:
    """How the search runs each trial it asks for: its config (an arrival rate in open
    loop, a slice of the deployment under a mean field), on shards when asked, written to
    ``out_dir`` and handed to ``on_trial_result``."""

    target: Target
    trajectories: Sequence[Trajectory]
    tiers: Sequence[Tier]
    base: TrialConfig
    rate_step: float | None
    out_dir: str | os.PathLike[str] | None
    on_trial_result: OnTrialResult | None
    on_window: Callable[[int, str, int, Transport], None] | None
    sharding: Sharding | None
    on_attempt_failed: OnAttemptFailed | None
    mean_field: MeanField | None

    async def run(
        self, transport: Transport, clock: Clock, writer: TrialWriter, n: int, index: int
    ) -> TrialOutcome:
        """Trial ``index`` at search point ``n``: its verdicts, data and marginal tiers."""
        config = config_for_trial(self.base, n, index)
        if self.rate_step is not None:
            config = open_trial_config(config, n, self.rate_step)
        served, config, record = slice_trial(
            transport, config, self.mean_field, virtual=clock.is_virtual
        )
        result, _ = await _one_trial(
            served,
            clock,
            self.target,
            self.trajectories,
            config,
            self.tiers,
            self.sharding,
            index=index,
            on_window=self._marks(index, served),
            on_attempt_failed=self.on_attempt_failed,
        )
        result.mean_field = record
        data = result.to_dict()
        if self.out_dir is not None:
            folder = trial_dir(self.out_dir, index, n)
            writer.write(folder, result)
            data["dir"] = str(folder)
        if self.on_trial_result is not None:
            self.on_trial_result(result)
        return TrialOutcome(
            {k: v.passed for k, v in result.verdicts.items()},
            data,
            sorted(k for k, v in result.verdicts.items() if v.marginal),
        )

    def _marks(self, index: int, served: Transport) -> Callable[[str, int], None] | None:
        """The trial's window marks as ``on_window`` takes them (with its index and the
        transport it was served on)."""
        hook = self.on_window
        if hook is None:
            return None

        def marks(mark: str, t_ns: int) -> None:
            hook(index, mark, t_ns, served)

        return marks
