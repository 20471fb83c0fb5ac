"""Entry points that put the pieces together: one trial, or a whole SLO-tier search.

These are what the CLI and the Celery task call. They are synchronous (they own their event
loop: uvloop on a real clock; an in-process target such as ``sim:PROFILE`` runs its own, the
simulator's virtual-time loop: ``runner.engine.targets``)::

    from runner.engine.runs import Target, search_job
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

import asyncio
import dataclasses
import gc
import os
import socket
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import uvloop

from runner.engine import targets
from runner.engine.search import (
    OnTrial,
    Progress,
    SearchResult,
    SearchTrial,
    TrialOutcome,
    run_search,
)
from runner.engine.shards import ShardFailed, Sharding, run_sharded_trial
from runner.engine.trajectory import Trajectory
from runner.engine.transport import Clock, RealClock, Transport
from runner.engine.trial import Tier, TrialConfig, TrialResult, run_trial, write_trial

T = TypeVar("T")
OnTrialResult = Callable[[TrialResult], None]
# (trial index, attempt, reason): an attempt of a sharded trial failed and is run again
OnAttemptFailed = Callable[[int, int, str], None]


@dataclass(slots=True)
class Target:
    """Where the requests go: an OpenAI-compatible base URL, or the address ``SCHEME:SPEC``
    of an in-process target served by the runner registered for SCHEME
    (``runner.engine.targets``; ``sim:PROFILE`` is the simulator on virtual time)."""

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
        from runner.engine.client import HttpTransport

        transport = HttpTransport(base_url, api_key=target.api_key, connect=target.connect)
        try:
            return await main(transport, RealClock())
        finally:
            await transport.aclose()

    return _run_real(real())


def quiet_gc() -> None:
    """Keep the cyclic garbage collector from pausing the event loop during a measurement.

    Everything allocated so far (dataset, modules) is frozen out of the collector's scans,
    and young-generation collections run less often: parsing streams allocates many small
    short-lived dicts, and a full collection over a large heap would stall every stream's
    timestamps for tens of milliseconds. Reference counting still frees everything promptly.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def _run_real(coro: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def trial_job(
    *,
    target: Target,
    trajectories: Sequence[Trajectory],
    config: TrialConfig,
    tiers: Sequence[Tier] = (),
    out_dir: str | os.PathLike[str] | None = None,
    sharding: Sharding | None = None,
) -> TrialResult:
    """One trial; writes DIR/trial.json and DIR/requests.jsonl when ``out_dir`` is given.
    With ``sharding`` of more than one shard, its agents run in shard processes."""

    async def main(transport: Transport, clock: Clock) -> TrialResult:
        result, _ = await _one_trial(
            transport, clock, target, trajectories, config, tiers, sharding, index=0
        )
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
) -> SearchResult:
    """The whole SLO-tier search; ``base`` gives every trial's settings but concurrency.

    Each finished trial's summary and verdicts are in ``SearchTrial.data`` (what
    ``on_trial`` receives and what ``prior_trials`` takes back); ``on_trial_result``
    additionally gets the full TrialResult with raw records (for uploading them).
    ``on_window(trial index, "start"|"end", t_ns, transport)`` marks each trial's
    measurement window (scrape /metrics there; it must not block). ``sharding`` runs each
    trial's agents in shard processes (docs/engine.md "Sharded trials"); a trial whose
    shard failed is reported to ``on_attempt_failed`` and run again under the same index.
    """
    names = [t.name for t in tiers]

    async def main(transport: Transport, clock: Clock) -> SearchResult:
        async def execute(n: int, phase: str, index: int) -> TrialOutcome:
            config = config_for_trial(base, n, index)
            marks = None
            if on_window is not None:
                hook = on_window

                def marks(mark: str, t_ns: int) -> None:
                    hook(index, mark, t_ns, transport)

            result, _ = await _one_trial(
                transport,
                clock,
                target,
                trajectories,
                config,
                tiers,
                sharding,
                index=index,
                on_window=marks,
                on_attempt_failed=on_attempt_failed,
            )
            data = result.to_dict()
            if out_dir is not None:
                folder = trial_dir(out_dir, index, n)
                write_trial(folder, result)
                data["dir"] = str(folder)
            if on_trial_result is not None:
                on_trial_result(result)
            return TrialOutcome(
                {k: v.passed for k, v in result.verdicts.items()},
                data,
                sorted(k for k, v in result.verdicts.items() if v.marginal),
            )

        return await run_search(
            execute,
            names,
            cap=cap,
            prior_trials=prior_trials,
            on_trial=on_trial,
            progress=progress,
            max_trials=max_trials,
        )

    return run_on_target(target, main)
