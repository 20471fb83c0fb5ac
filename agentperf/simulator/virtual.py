"""Virtual-time mode: the engine runs against the simulated deployment in process.

``run_with_simulator(profile, main, seed=...)`` runs ``main(transport, clock)`` on a
``VirtualEventLoop``: an asyncio loop whose ``time()`` is virtual and which, when nothing is
ready, jumps straight to the next timer instead of sleeping. ``SimTransport.send`` resolves
when the simulated request completes, with the ``Exchange`` timestamps the model computed
(``t_first`` = end of the iteration that emitted the first token, ``t_last`` = the last).
Everything the engine does must wait through asyncio timers or futures (``clock.sleep``,
``asyncio.wait_for``, ...); threads and real I/O are not available on this loop.
"""

from __future__ import annotations

import asyncio
import gc
import heapq
import math
import selectors
from asyncio import events
from asyncio.futures import _set_result_unless_cancelled  # type: ignore[attr-defined]
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from agentperf.engine.targets import TargetRunner
from agentperf.engine.transport import (
    ERROR_HTTP_STATUS,
    ERROR_TIMEOUT,
    ERROR_WRONG_LENGTH,
    Clock,
    Exchange,
    RequestSpec,
    Transport,
)
from agentperf.simulator.behaviour import HONEST, Behaviour
from agentperf.simulator.deployment import Deployment, RejectedRequest
from agentperf.simulator.profile import Profile, load_profile
from agentperf.simulator.prompts import PromptAccountant, PromptError, PromptShape, filler
from agentperf.simulator.scheduler import SimRequest, Timeline

T = TypeVar("T")

# Young-generation threshold of the cyclic collector while a virtual-time run is on: virtual
# time has no timestamps a collector pause could distort. The count is of objects allocated
# and not yet freed, and a trial's records (a few objects per request) are freed when it
# ends, so at 5M a young collection rarely runs inside a trial and a trial's records are
# never scanned (at 500k, a 4,096-agent trial scanned its records at ~0.6 s a collection);
# nothing cyclic is left per request, so waiting costs no memory (docs/benchmarks.md "Rack
# scale in under five minutes"). None leaves the collector as the caller set it (the
# reference the test of identical records compares with). Collection timing never changes
# what is computed.
VIRTUAL_GC_YOUNG: int | None = 5_000_000


# asyncio.base_events.MAXIMUM_SELECT_TIMEOUT: the longest wait one select may ask for
_MAX_SELECT_TIMEOUT = 24 * 3600


class VirtualDeadlock(RuntimeError):
    """Every task waits and no timer is scheduled: virtual time can never advance."""


class _NoIOSelector(selectors.BaseSelector):
    """A selector that never reports I/O; waiting advances the loop's virtual clock."""

    def __init__(self) -> None:
        self._keys: dict[int, selectors.SelectorKey] = {}
        self.loop: VirtualEventLoop | None = None

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._keys[fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._keys.pop(fd)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        assert self.loop is not None
        self.loop._advance(timeout)
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._keys

    def close(self) -> None:
        self._keys.clear()


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on virtual time (integer nanoseconds from 0).

    Its timers are kept as ``(when, handle)`` pairs instead of bare handles, so the heap
    compares floats in C instead of calling ``TimerHandle.__lt__`` (Python) at every step;
    ``_run_once`` is CPython 3.11's, for that heap and for the selector that never reports
    I/O. Every comparison answers as asyncio's does (a tie on ``when`` is "not less" both
    ways), so the heap, the order callbacks run in and every record are the same
    (docs/benchmarks.md "Rack scale in under five minutes"). Debug mode is not supported.
    """

    # asyncio.BaseEventLoop's heap of timers (CPython's, unlisted in typeshed), here of
    # (when, handle) pairs: the next timer is where virtual time jumps to.
    _scheduled: list[tuple[float, asyncio.TimerHandle]]
    _ready: Any
    _stopping: bool
    _timer_cancelled_count: int
    _clock_resolution: float

    def __init__(self) -> None:
        self._vnow_ns = 0
        selector = _NoIOSelector()
        super().__init__(selector=selector)
        selector.loop = self

    def time(self) -> float:
        return self._vnow_ns / 1e9

    def now_ns(self) -> int:
        return self._vnow_ns

    def _advance(self, timeout: float | None) -> None:
        if timeout is None:
            raise VirtualDeadlock(
                "virtual-time deadlock: every task is waiting and no timer is scheduled"
            )
        if timeout <= 0:
            return
        scheduled = self._scheduled
        when = scheduled[0][0] if scheduled else self.time() + timeout
        target = round(when * 1e9)
        self._vnow_ns = target if target > self._vnow_ns else self._vnow_ns + 1

    def call_at(  # type: ignore[override]
        self, when: float, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()  # type: ignore[attr-defined]
        timer = events.TimerHandle(when, callback, args, self, context)
        heapq.heappush(self._scheduled, (when, timer))
        timer._scheduled = True  # type: ignore[attr-defined]
        return timer

    def call_soon(  # type: ignore[override]
        self, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> asyncio.Handle:
        # BaseEventLoop.call_soon and _call_soon in one, without the debug branches
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        handle = events.Handle(callback, args, self, context)
        self._ready.append(handle)
        return handle

    def _run_once(self) -> None:
        """asyncio.BaseEventLoop._run_once (CPython 3.11) on the (when, handle) heap, with
        the select step replaced by the jump to the next timer; no debug branch."""
        handle: Any = None
        scheduled = self._scheduled
        sched_count = len(scheduled)
        if sched_count > 100 and self._timer_cancelled_count / sched_count > 0.5:
            # asyncio's rebuild without the cancelled timers (same list order, heapify)
            kept = []
            for entry in scheduled:
                handle = entry[1]
                if handle._cancelled:
                    handle._scheduled = False
                else:
                    kept.append(entry)
            heapq.heapify(kept)
            self._scheduled = scheduled = kept
            self._timer_cancelled_count = 0
        else:
            while scheduled and scheduled[0][1]._cancelled:
                self._timer_cancelled_count -= 1
                heapq.heappop(scheduled)[1]._scheduled = False  # type: ignore[attr-defined]
        ready = self._ready
        if ready or self._stopping:
            timeout: float | None = 0
        elif scheduled:
            timeout = min(max(0, scheduled[0][0] - self.time()), _MAX_SELECT_TIMEOUT)
        else:
            timeout = None
        self._advance(timeout)
        end_time = self.time() + self._clock_resolution
        heappop = heapq.heappop
        while scheduled:
            if scheduled[0][0] >= end_time:
                break
            handle = heappop(scheduled)[1]
            handle._scheduled = False
            ready.append(handle)
        popleft = ready.popleft
        for _ in range(len(ready)):
            handle = popleft()
            if handle._cancelled:
                continue
            handle._run()
        handle = None  # break cycles when an exception occurs (as asyncio does)


class VirtualClock:
    """The engine's Clock on a VirtualEventLoop."""

    __slots__ = ("_loop",)

    def __init__(self, loop: VirtualEventLoop) -> None:
        self._loop = loop

    def now_ns(self) -> int:
        return self._loop.now_ns()

    async def sleep(self, seconds: float) -> None:
        # asyncio.sleep without its get_running_loop and extra coroutine: the same timer
        # (call_later's when: now + seconds) and the same cancel of it afterwards
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        loop = self._loop
        fut = loop.create_future()
        timer = loop.call_at(loop.time() + seconds, _set_result_unless_cancelled, fut, None)
        try:
            await fut
        finally:
            timer.cancel()

    @property
    def is_virtual(self) -> bool:
        return True


class LoopTimeline:
    """Drives the model with the running loop's timers (virtual loop: exact nanoseconds)."""

    __slots__ = ("_loop", "_now")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        if isinstance(loop, VirtualEventLoop):
            self._now: Callable[[], int] = loop.now_ns
        else:
            self._now = lambda: round(loop.time() * 1e9)

    def now_ns(self) -> int:
        return self._now()

    def call_at(self, t_ns: int, fn: Callable[[], None]) -> None:
        self._loop.call_at(t_ns / 1e9, fn)


def _int_field(body: dict[str, Any], *names: str) -> int | None:
    for name in names:
        v = body.get(name)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int):
                raise PromptError(f"{name}: an integer is required")
            return v
    return None


def _session_key(spec: RequestSpec) -> int | None:
    """The routing key of ``spec``'s agent session (sticky routing to a front replica)."""
    return hash(spec.session_id) if spec.session_id else None


class SimTransport:
    """The engine's Transport, answered by the simulated deployment in process."""

    def __init__(
        self,
        profile: Profile,
        *,
        seed: int = 0,
        check_output_length: bool = True,
        timeline: Timeline | None = None,
        behaviour: Behaviour | None = None,
    ) -> None:
        # how the deployment answers: as the model says, or a test's plugin
        # (agentperf/simulator/behaviour.py)
        self.behaviour: Behaviour = behaviour if behaviour is not None else HONEST
        self.profile = profile
        self.timeline = timeline or LoopTimeline(asyncio.get_running_loop())
        self.deployment = Deployment(self.behaviour.profile(profile), self.timeline, seed=seed)
        self._reported: dict[str, int] = {}
        # cache_inflated: cached tokens reported beyond what the cache served, added to the
        # hit counter as they are reported
        self._inflated_hits = 0
        self.accountant = PromptAccountant(identity_cache=True)
        self.check_output_length = check_output_length
        self.served = set(profile.served_model_names)
        self.in_flight = 0
        # Per-request timeouts without a loop timer per request: a heap of (deadline, seq,
        # future) and one timer at the earliest deadline still pending. Finished requests
        # are dropped from the heap's head lazily.
        self._deadlines: list[tuple[float, int, asyncio.Future[None]]] = []
        self._deadline_seq = 0
        self._sweep: asyncio.TimerHandle | None = None
        self._sweep_at = math.inf
        self._slices: dict[int, SimTransport] = {}

    def mean_field_factors(self) -> tuple[int, ...]:
        """The k this deployment can be cut into for mean-field trials (docs/engine.md
        "Mean-field trials"); only 1 under a test's behaviour (what it fakes is the whole)."""
        if self.behaviour:
            return (1,)
        return self.profile.mean_field_factors()

    def thinned(self, k: int) -> SimTransport:
        """The transport to a 1/k slice of this deployment (``Profile.thinned``), on the
        same timeline; one per k, kept, like a deployment that stays up between trials."""
        if k == 1:
            return self
        found = self._slices.get(k)
        if found is None:
            found = SimTransport(
                self.profile.thinned(k),
                seed=self.deployment.seed,
                check_output_length=self.check_output_length,
                timeline=self.timeline,
                behaviour=self.behaviour,
            )
            self._slices[k] = found
        return found

    async def send(self, spec: RequestSpec) -> Exchange:
        tl = self.timeline
        ex = Exchange(request_id=spec.request_id, t_send_ns=tl.now_ns())
        body = spec.body
        model = body.get("model")
        if model is not None and model not in self.served:
            return self._fail(ex, 404, f"The model `{model}` does not exist.")
        try:
            shape = self._shape(spec)
            if spec.api == "chat":
                max_tokens = _int_field(body, "max_completion_tokens", "max_tokens")
            else:
                max_tokens = _int_field(body, "max_tokens")
            req = self.deployment.new_request(
                spec.request_id,
                shape,
                max_tokens=max_tokens,
                min_tokens=_int_field(body, "min_tokens") or 0,
                ignore_eos=bool(body.get("ignore_eos")),
                output_kind=(spec.metadata or {}).get("output_kind"),
            )
        except (PromptError, RejectedRequest) as exc:
            return self._fail(ex, 400, str(exc))
        if self.behaviour:
            req.stop_at, reported = self.behaviour.lengths(
                req.stop_at, in_flight=self.in_flight + 1
            )
            self._reported[spec.request_id] = reported
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()

        def done(_: SimRequest) -> None:
            if not fut.done():
                fut.set_result(None)

        req.on_done = done
        self._expire_at(loop, loop.time() + spec.timeout_s, fut)
        self.in_flight += 1
        try:
            self.deployment.submit(req, session_key=_session_key(spec))
            await fut
        except TimeoutError:
            self.deployment.cancel(req)
            ex.error_class = ERROR_TIMEOUT
            ex.error_detail = f"no complete response within {spec.timeout_s:g} s"
            ex.t_end_ns = tl.now_ns()
            return ex
        finally:
            self.in_flight -= 1
        return self._fill(ex, req, spec, stream=bool(body.get("stream", False)))

    def prime(self, spec: RequestSpec) -> None:
        """Put ``spec``'s prompt in the prefix cache of the replica its session is routed
        to, at no cost and with no counters touched (``ReplayConfig.prime_cache``)."""
        try:
            shape = self._shape(spec)
        except PromptError:
            return  # the real request will fail the same way, and say so
        self.deployment.prime(shape, session_key=_session_key(spec))

    def _shape(self, spec: RequestSpec) -> PromptShape:
        """Token count and prefix keys of ``spec``'s prompt (what the cache keys on)."""
        body = spec.body
        if spec.api != "chat":
            return self.accountant.completion(body)
        return self.accountant.chat(
            self.behaviour.prefix_body(body) if self.behaviour else body,
            spec.message_tokens,
            session=spec.session_id or None,
        )

    def _expire_at(
        self, loop: asyncio.AbstractEventLoop, when: float, fut: asyncio.Future[None]
    ) -> None:
        self._deadline_seq += 1
        heap = self._deadlines
        if len(heap) > 2 * self.in_flight + 4096:  # mostly finished requests: compact
            heap[:] = [d for d in heap if not d[2].done()]
            heapq.heapify(heap)
        heapq.heappush(heap, (when, self._deadline_seq, fut))
        if when < self._sweep_at:
            if self._sweep is not None:
                self._sweep.cancel()
            self._sweep_at = when
            self._sweep = loop.call_at(when, self._expire_due, loop)

    def _expire_due(self, loop: asyncio.AbstractEventLoop) -> None:
        """Fail every pending request past its deadline; re-arm for the next pending one."""
        heap, now = self._deadlines, loop.time()
        while heap and (heap[0][0] <= now or heap[0][2].done()):
            _, _, fut = heapq.heappop(heap)
            if not fut.done():
                fut.set_exception(TimeoutError())
        self._sweep = None
        self._sweep_at = math.inf
        if heap:
            self._sweep_at = heap[0][0]
            self._sweep = loop.call_at(self._sweep_at, self._expire_due, loop)

    def _fail(self, ex: Exchange, status: int, detail: str) -> Exchange:
        ex.http_status = status
        ex.error_class = ERROR_HTTP_STATUS
        ex.error_detail = f"HTTP {status}: {detail}"
        ex.t_end_ns = self.timeline.now_ns()
        return ex

    def _fill(self, ex: Exchange, req: SimRequest, spec: RequestSpec, *, stream: bool) -> Exchange:
        n = req.stop_at
        ex.http_status = 200
        ex.t_last_ns = req.t_last_ns
        ex.t_end_ns = req.t_last_ns
        if stream:
            ex.t_first_ns = req.t_first_ns
            ex.n_output_events = req.n_events
            ex.n_reads = req.n_events
        else:
            ex.t_first_ns = req.t_last_ns
            ex.n_output_events = 1
            ex.n_reads = 1
        ex.prompt_tokens = req.prompt.tokens
        ex.cached_tokens = req.cached
        ex.finish_reason = req.finish_reason
        if self.behaviour:
            ex.cached_tokens = self.behaviour.cached(req.cached, req.prompt.tokens)
            self._inflated_hits += ex.cached_tokens - req.cached
            ex.content = self.behaviour.text(n)
            n = self._reported.pop(spec.request_id, n)
        else:
            ex.content = filler(n)
        ex.completion_tokens = n
        if self.check_output_length and n != spec.target_output_tokens:
            ex.error_class = ERROR_WRONG_LENGTH
            ex.error_detail = f"completion_tokens={n} target={spec.target_output_tokens}"
        return ex

    def metrics_text(self) -> str:
        """The deployment's counters in the real-time server's /metrics format (vLLM names),
        for window scrapes on virtual time."""
        c = self.deployment.totals()
        label = f'{{model_name="{self.profile.served_model_names[0]}"}}'
        rows: tuple[tuple[str, float], ...] = (
            ("vllm:prefix_cache_queries_total", c.prefix_queries),
            ("vllm:prefix_cache_hits_total", c.prefix_hits + self._inflated_hits),
            ("vllm:prompt_tokens_total", c.prompt_tokens),
            ("vllm:generation_tokens_total", c.generation_tokens),
            ("vllm:request_success_total", c.requests_finished),
            ("vllm:spec_decode_num_drafts_total", c.spec_drafts),
            ("vllm:spec_decode_num_draft_tokens_total", c.spec_draft_tokens),
            ("vllm:spec_decode_num_accepted_tokens_total", c.spec_accepted),
            (
                "sim:accelerators_used",
                self.behaviour.accelerators_seen(self.profile.accelerators_used),
            ),
        )
        if self.profile.power_tdp_w is not None:  # modelled, never measured
            rows += (
                ("sim:modelled_dynamic_energy_joules_total", c.energy_j),
                ("sim:modelled_idle_power_watts", self.profile.power_idle_w),
            )
        return "".join(f"{name}{label} {value}\n" for name, value in rows)

    async def aclose(self) -> None:
        return None


def run_with_simulator(
    profile: str | Path | Profile,
    main: Callable[[Transport, Clock], Awaitable[T]],
    *,
    seed: int,
    catalog_dir: str | Path | None = None,
    transport_out: list[SimTransport] | None = None,
    behaviour: Behaviour | None = None,
) -> T:
    """Run ``main(transport, clock)`` on virtual time against the simulated ``profile``.

    ``profile`` is a profile name (``agentperf/simulator/profiles/NAME.yaml``), a path, or a
    loaded Profile. ``transport_out``, if given, receives the SimTransport (for counters).
    ``behaviour``: how the deployment answers (agentperf/simulator/behaviour.py; the
    verification tests' dishonest modes are one).
    """
    prof = (
        profile if isinstance(profile, Profile) else load_profile(profile, catalog_dir=catalog_dir)
    )
    loop = VirtualEventLoop()

    async def runner() -> T:
        transport = SimTransport(prof, seed=seed, behaviour=behaviour)
        if transport_out is not None:
            transport_out.append(transport)
        try:
            return await main(transport, VirtualClock(loop))
        finally:
            await transport.aclose()

    saved = gc.get_threshold()
    if VIRTUAL_GC_YOUNG is not None and gc.isenabled():
        gc.set_threshold(max(saved[0], VIRTUAL_GC_YOUNG), *saved[1:])
    try:
        return loop.run_until_complete(runner())
    finally:
        gc.set_threshold(*saved)
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


# The ``sim`` target scheme (``sim:PROFILE``): the agentperf.targets entry point in
# pyproject.toml names this, so the engine finds it without importing the simulator
# (docs/engine.md "Targets"); the annotation holds it to the engine's interface.
sim_target: TargetRunner = run_with_simulator
