"""The SLO-tier search (docs/engine.md "Search decisions"), as pure logic over a list of
finished trials.

``next_step(trials, ...)`` looks only at the trials run so far and says what to run next,
so the search resumes after a crash from the stored trial list and is tested with scripted
oracles. ``run_search`` is the loop around it: it calls an executor per trial (a real trial,
the simulator, or a test oracle) and reports each finished trial and the progress.

Rules, per tier, from the trials so far:

- a concurrency N *passes* a tier when every trial at N passed it (a failed repeat turns N
  into a fail: conservative for noisy systems);
- ``lowest_fail`` is the smallest failing N; ``highest_pass`` the largest passing N below it
  (0 when none), so passes above a fail never raise a result — they set ``non_monotone``;
- ramp: N = 1, 2, 4, … (then the cap) until every tier has failed somewhere or the cap ran;
- bisection: while a tier's gap ``lowest_fail - highest_pass`` exceeds
  ``max(1, 5% of highest_pass)``, run a midpoint. Every trial gives verdicts for all tiers,
  so the midpoint chosen is the one inside the most open intervals;
- confirmation: the result (highest pass) is run a second time; a failed repeat is flagged
  ``failed_confirmation`` and the search goes on below it;
- marginal verdicts: a trial whose bootstrap interval straddles a tier's threshold marks
  that tier ``marginal`` (``SearchTrial.marginal``). When such an N bounds a tier's result
  (its highest pass or lowest fail), the search repeats N until it has three trials there
  (phase ``repeat``) and N's verdict for that tier is the majority of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

Phase = Literal["ramp", "bisect", "confirm", "repeat"]
PHASE_RAMP: Final = "ramp"
PHASE_BISECT: Final = "bisect"
PHASE_CONFIRM: Final = "confirm"
PHASE_REPEAT: Final = "repeat"
PHASES: tuple[Phase, ...] = (PHASE_RAMP, PHASE_BISECT, PHASE_CONFIRM, PHASE_REPEAT)
MARGINAL_TRIALS = 3  # a marginal verdict is settled by the majority of this many trials

FLAG_NON_MONOTONE = "non_monotone"
FLAG_FAILED_CONFIRMATION = "failed_confirmation"
FLAG_CAPPED = "capped"
FLAG_UNCONFIRMED = "unconfirmed"
FLAG_BUDGET = "trial_budget_exhausted"


def _phase(value: Any) -> Phase:
    if value not in PHASES:
        raise ValueError(f"unknown search phase {value!r}; one of {', '.join(PHASES)}")
    return cast(Phase, value)


@dataclass(slots=True)
class SearchTrial:
    """One finished trial as the search sees it; ``data`` is whatever the executor stores."""

    index: int
    concurrency: int
    phase: Phase
    verdicts: dict[str, bool]
    data: dict[str, Any] = field(default_factory=dict)
    marginal: list[str] = field(default_factory=list)  # tiers whose verdict was marginal

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "concurrency": self.concurrency,
            "phase": self.phase,
            "verdicts": dict(self.verdicts),
            "data": self.data,
            "marginal": list(self.marginal),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SearchTrial:
        data = dict(d.get("data") or {})
        marginal = d.get("marginal")
        if marginal is None:  # stored trials keep it inside each tier's verdict
            stored = data.get("verdicts") or {}
            marginal = [
                name for name, v in stored.items() if isinstance(v, dict) and v.get("marginal")
            ]
        return cls(
            index=int(d["index"]),
            concurrency=int(d["concurrency"]),
            phase=_phase(d["phase"]),
            verdicts={str(k): bool(v) for k, v in d["verdicts"].items()},
            data=data,
            marginal=[str(m) for m in marginal],
        )


@dataclass(slots=True)
class TrialOutcome:
    """What an executor returns: a verdict per tier, and data to keep with the trial."""

    verdicts: dict[str, bool]
    data: dict[str, Any] = field(default_factory=dict)
    marginal: list[str] = field(default_factory=list)


class TierResult(BaseModel):
    """One tier's search result. The contract's ``TierResult`` (agentperf/contract.py) is
    this model under the contract's rules: declared once, here."""

    model_config = ConfigDict(extra="forbid")

    name: str
    # highest passing concurrency (0: even one agent failed)
    max_agents: Annotated[int, Field(ge=0)]
    lowest_fail: int | None
    confirmed: bool
    converged: bool
    flags: list[str]

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


@dataclass(slots=True)
class SearchResult:
    trials: list[SearchTrial]
    tiers: dict[str, TierResult]
    cap: int
    flags: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "cap": self.cap,
            "flags": list(self.flags),
            "max_agents": {name: t.max_agents for name, t in self.tiers.items()},
            "tiers": {name: t.to_dict() for name, t in self.tiers.items()},
            "trials": [t.to_dict() for t in self.trials],
        }


def tolerance(highest_pass: int, frac: float = 0.05) -> int:
    """Largest gap between highest pass and lowest fail at which a tier is settled."""
    return max(1, int(highest_pass * frac))


def ramp_points(cap: int) -> list[int]:
    points = []
    n = 1
    while n < cap:
        points.append(n)
        n *= 2
    points.append(cap)
    return points


@dataclass(slots=True)
class _TierState:
    name: str
    highest_pass: int
    lowest_fail: int | None
    confirmations: int  # trials at highest_pass (all passed, by definition)
    non_monotone: bool
    failed_confirmation: bool
    unsettled: list[int] = field(default_factory=list)  # marginal Ns short of their repeats


def _passes(vs: list[bool], marginal: bool) -> bool:
    """N passes when every trial there passed; a marginal N with enough trials by majority."""
    if marginal and len(vs) >= MARGINAL_TRIALS:
        return sum(vs) * 2 > len(vs)
    return all(vs)


def _tier_state(trials: Sequence[SearchTrial], name: str) -> _TierState:
    by_n: dict[int, list[bool]] = {}
    marginal_ns: set[int] = set()
    for t in trials:
        if name in t.verdicts:
            by_n.setdefault(t.concurrency, []).append(t.verdicts[name])
            if name in t.marginal:
                marginal_ns.add(t.concurrency)
    fails = [n for n, vs in by_n.items() if not _passes(vs, n in marginal_ns)]
    lowest_fail = min(fails) if fails else None
    passes = [n for n, vs in by_n.items() if _passes(vs, n in marginal_ns)]
    below = [n for n in passes if lowest_fail is None or n < lowest_fail]
    highest_pass = max(below) if below else 0
    single_passes = [t.concurrency for t in trials if t.verdicts.get(name) is True]
    single_fails = [t.concurrency for t in trials if t.verdicts.get(name) is False]
    non_monotone = bool(single_passes and single_fails) and max(single_passes) > min(single_fails)
    failed_confirmation = False
    seen_pass: set[int] = set()
    for t in trials:
        v = t.verdicts.get(name)
        if v is True:
            seen_pass.add(t.concurrency)
        elif v is False and t.phase == PHASE_CONFIRM and t.concurrency in seen_pass:
            failed_confirmation = True
    return _TierState(
        name=name,
        highest_pass=highest_pass,
        lowest_fail=lowest_fail,
        confirmations=len(by_n.get(highest_pass, [])),
        non_monotone=non_monotone,
        failed_confirmation=failed_confirmation,
        unsettled=sorted(
            n
            for n in (highest_pass, lowest_fail)
            if n and n in marginal_ns and len(by_n.get(n, [])) < MARGINAL_TRIALS
        ),
    )


def _converged(s: _TierState, cap: int, frac: float) -> bool:
    if s.lowest_fail is None:
        return s.highest_pass >= cap
    return s.lowest_fail - s.highest_pass <= tolerance(s.highest_pass, frac)


def next_step(
    trials: Sequence[SearchTrial],
    tier_names: Sequence[str],
    *,
    cap: int,
    tolerance_frac: float = 0.05,
    confirm: bool = True,
) -> tuple[Phase, int] | None:
    """(phase, concurrency) of the next trial to run, or None when the search is done."""
    if cap < 1:
        raise ValueError("cap must be >= 1")
    states = [_tier_state(trials, name) for name in tier_names]
    tried = {t.concurrency for t in trials}
    # 1. ramp until every tier failed somewhere (or the cap ran)
    if any(s.lowest_fail is None for s in states) and cap not in tried:
        for n in ramp_points(cap):
            if n not in tried:
                return PHASE_RAMP, n
    # 2. a marginal verdict at a bound of some tier's result: repeat it before relying on it
    unsettled = sorted({n for s in states for n in s.unsettled})
    if unsettled:
        return PHASE_REPEAT, unsettled[0]
    # 3. bisection: the midpoint inside the most open intervals
    open_states = [s for s in states if not _converged(s, cap, tolerance_frac)]
    open_states = [s for s in open_states if s.lowest_fail is not None]
    if open_states:
        best: tuple[int, int, int] | None = None  # (-covered, -width, n)
        for s in open_states:
            assert s.lowest_fail is not None
            mid = (s.highest_pass + s.lowest_fail) // 2
            covered = sum(
                1
                for o in open_states
                if o.lowest_fail is not None and o.highest_pass < mid < o.lowest_fail
            )
            key = (-covered, -(s.lowest_fail - s.highest_pass), mid)
            if best is None or key < best:
                best = key
        assert best is not None
        return PHASE_BISECT, best[2]
    # 4. confirmation of each result (lowest first), once
    if confirm:
        pending = sorted(
            {s.highest_pass for s in states if s.highest_pass > 0 and s.confirmations < 2}
        )
        if pending:
            return PHASE_CONFIRM, pending[0]
    return None


def tier_results(
    trials: Sequence[SearchTrial],
    tier_names: Sequence[str],
    *,
    cap: int,
    tolerance_frac: float = 0.05,
    confirm: bool = True,
) -> dict[str, TierResult]:
    out: dict[str, TierResult] = {}
    for name in tier_names:
        s = _tier_state(trials, name)
        flags = []
        if s.non_monotone:
            flags.append(FLAG_NON_MONOTONE)
        if s.failed_confirmation:
            flags.append(FLAG_FAILED_CONFIRMATION)
        if s.lowest_fail is None and s.highest_pass >= cap:
            flags.append(FLAG_CAPPED)
        confirmed = s.highest_pass > 0 and s.confirmations >= 2
        if confirm and s.highest_pass > 0 and not confirmed:
            flags.append(FLAG_UNCONFIRMED)
        out[name] = TierResult(
            name=name,
            max_agents=s.highest_pass,
            lowest_fail=s.lowest_fail,
            confirmed=confirmed,
            converged=_converged(s, cap, tolerance_frac),
            flags=flags,
        )
    return out


TrialExecutor = Callable[[int, str, int], Awaitable[TrialOutcome]]
"""(concurrency, phase, trial index) -> outcome. Runs one trial; never returns partial data."""
OnTrial = Callable[[SearchTrial], None]
Progress = Callable[[str, int, int], None]
"""(phase, trial index, concurrency), called before each trial starts."""


async def run_search(
    execute: TrialExecutor,
    tier_names: Sequence[str],
    *,
    cap: int,
    prior_trials: Iterable[SearchTrial | dict[str, Any]] = (),
    on_trial: OnTrial | None = None,
    progress: Progress | None = None,
    tolerance_frac: float = 0.05,
    confirm: bool = True,
    max_trials: int = 60,
) -> SearchResult:
    """Run the search to the end, starting from ``prior_trials`` (a resumed search).

    ``on_trial`` is called with every newly finished trial, in order, before the next one
    starts: store it there and pass the stored list back as ``prior_trials`` to resume.
    """
    trials = [t if isinstance(t, SearchTrial) else SearchTrial.from_dict(t) for t in prior_trials]
    trials.sort(key=lambda t: t.index)
    flags: list[str] = []
    while True:
        step = next_step(
            trials, tier_names, cap=cap, tolerance_frac=tolerance_frac, confirm=confirm
        )
        if step is None:
            break
        if len(trials) >= max_trials:
            flags.append(FLAG_BUDGET)
            break
        phase, n = step
        index = len(trials)
        if progress is not None:
            progress(phase, index, n)
        outcome = await execute(n, phase, index)
        missing = set(tier_names) - set(outcome.verdicts)
        if missing:
            raise ValueError(f"trial at N={n} has no verdict for tiers {sorted(missing)}")
        trial = SearchTrial(
            index, n, phase, dict(outcome.verdicts), dict(outcome.data), list(outcome.marginal)
        )
        trials.append(trial)
        if on_trial is not None:
            on_trial(trial)
    tiers = tier_results(
        trials, tier_names, cap=cap, tolerance_frac=tolerance_frac, confirm=confirm
    )
    for t in tiers.values():
        for flag in t.flags:
            if flag in (FLAG_NON_MONOTONE, FLAG_FAILED_CONFIRMATION) and flag not in flags:
                flags.append(flag)
    return SearchResult(trials=trials, tiers=tiers, cap=cap, flags=flags)
