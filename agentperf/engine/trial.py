"""One trial at concurrency N: warm-up, measurement window [W0, W1), drain; tier verdicts.

Agents start spread over the ramp (by default the whole warm-up), stop sending at W1, and
the trial waits for every request already sent (the drain), so every request sent in the
window has its outcome. Client health (event-loop lag, process CPU) is measured over the
window on a real clock and reported as not measured on a virtual one.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_serializer, field_validator

from agentperf.engine import rawrecords
from agentperf.engine.cachetruth import summarize_cache_truth
from agentperf.engine.health import monitor_health
from agentperf.engine.metrics import (
    NS,
    SESSION_CRITERIA,
    SESSION_CRITERION_REQUESTS,
    SESSION_CRITERION_SESSIONS,
    ClientHealth,
    RequestRecord,
    TrialSummary,
    judge_client_health,
    percentile,
    summarize,
    summarize_sessions,
)
from agentperf.engine.replay import ARRIVAL_OPEN, Replay, ReplayConfig
from agentperf.engine.stats import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    Interval,
    min_requests_table,
    trial_intervals,
)
from agentperf.engine.trajectory import Trajectory
from agentperf.engine.transport import Clock, Transport


class Tier(BaseModel):
    """An SLO tier: what one agent must get for the system to carry N agents. Declared
    once, here: the run contract's ``Tier`` is this model under the contract's rules
    (agentperf/contract.py), and the catalog's tier sets give these (catalog.SloTierSet)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    min_p25_output_speed: float
    max_ttft_s: float
    ttft_percentile: Annotated[float, Field(gt=0, lt=100)] = 75.0
    max_error_rate: float = 0.01
    # "requests": the trial's p25 over requests (the default); "sessions": at least
    # min_session_share of the window's sessions met the tier (docs/engine.md "Session SLOs")
    criterion: Literal["requests", "sessions"] = "requests"  # SESSION_CRITERIA
    min_session_share: Annotated[float, Field(gt=0, le=1)] = 0.95

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # positional as the fields are declared, as a tier is written: Tier("20", 20, 10.0)
        names = list(type(self).model_fields)
        if len(args) > len(names):
            raise TypeError(f"Tier takes at most {len(names)} positional arguments")
        super().__init__(**dict(zip(names, args, strict=False)), **kwargs)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def parse_tiers(data: Any) -> list[Tier]:
    """Tiers from JSON data: a list of objects (or ``{"tiers": [...]}``)."""
    if isinstance(data, dict) and "tiers" in data:
        data = data["tiers"]
    if not isinstance(data, list) or not data:
        raise ValueError("tiers must be a non-empty JSON list of objects")
    tiers: list[Tier] = []
    allowed = {
        "name",
        "min_p25_output_speed",
        "max_ttft_s",
        "ttft_percentile",
        "max_error_rate",
        "criterion",
        "min_session_share",
    }
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise ValueError(f"tiers[{i}] is not an object")
        unknown = set(item) - allowed
        if unknown:
            raise ValueError(f"tiers[{i}]: unknown fields {sorted(unknown)}")
        try:
            name = str(item["name"])
            speed = float(item["min_p25_output_speed"])
            ttft = float(item["max_ttft_s"])
            percentile = float(item.get("ttft_percentile", 75.0))
            error_rate = float(item.get("max_error_rate", 0.01))
            criterion = str(item.get("criterion", SESSION_CRITERION_REQUESTS))
            share = float(item.get("min_session_share", 0.95))
        except KeyError as exc:
            raise ValueError(f"tiers[{i}]: missing field {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            raise ValueError(f"tiers[{i}]: {exc}") from exc
        if not 0 < percentile < 100:
            raise ValueError(f"tiers[{i}]: ttft_percentile must be in (0, 100)")
        if criterion not in SESSION_CRITERIA:
            raise ValueError(f"tiers[{i}]: criterion must be one of {', '.join(SESSION_CRITERIA)}")
        if not 0 < share <= 1:
            raise ValueError(f"tiers[{i}]: min_session_share must be in (0, 1]")
        tier = Tier.model_validate(
            {
                "name": name,
                "min_p25_output_speed": speed,
                "max_ttft_s": ttft,
                "ttft_percentile": percentile,
                "max_error_rate": error_rate,
                "criterion": criterion,
                "min_session_share": share,
            }
        )
        tiers.append(tier)
    names = [t.name for t in tiers]
    if len(set(names)) != len(names):
        raise ValueError("tier names must be unique")
    return tiers


def load_tiers(path: str | os.PathLike[str]) -> list[Tier]:
    return parse_tiers(json.loads(Path(path).read_text()))


class TierVerdict(BaseModel):
    """One tier's verdict on one trial. The contract's ``TierVerdict`` (agentperf/contract.py)
    is this model with every field required and nothing coerced: the trial report and the
    stored ``Trial.verdicts`` carry it as built here."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    reasons: list[str] = Field(default_factory=list)
    # the TTFT at this tier's percentile; infinite (failures) is null in JSON
    ttft_s: Annotated[float, WithJsonSchema({"anyOf": [{"type": "number"}, {"type": "null"}]})] = (
        math.inf
    )
    # The bootstrap interval of p25 speed or of the tier's TTFT percentile straddles the
    # tier's threshold, and nothing else decided the verdict: it could go either way.
    marginal: bool = False

    @field_validator("ttft_s", mode="before")
    @classmethod
    def _infinite_from_null(cls, value: Any) -> Any:
        return math.inf if value is None else value

    @field_serializer("ttft_s")
    def _null_for_infinite(self, value: float) -> float | None:
        return None if math.isinf(value) else value

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def evaluate_tiers(
    summary: TrialSummary, tiers: Sequence[Tier], *, min_requests: int
) -> dict[str, TierVerdict]:
    """A tier passes when every condition of its verdict holds (docs/engine.md "Definitions", "Tier
    verdict"); reasons name each miss."""
    out: dict[str, TierVerdict] = {}
    for tier in tiers:
        ttft = summary.ttft_at(tier.ttft_percentile)
        reasons: list[str] = []
        if tier.criterion == SESSION_CRITERION_SESSIONS:
            reasons.extend(_session_reasons(summary, tier))
        else:
            if summary.p25_output_speed < tier.min_p25_output_speed:
                reasons.append(
                    f"p25 output speed {summary.p25_output_speed:.1f} < "
                    f"{tier.min_p25_output_speed:g} tok/s"
                )
            if not ttft <= tier.max_ttft_s:
                reasons.append(f"TTFT p{tier.ttft_percentile:g} {ttft:.3f} > {tier.max_ttft_s:g} s")
        if summary.error_rate > tier.max_error_rate:
            reasons.append(f"error rate {summary.error_rate:.3%} > {tier.max_error_rate:.3%}")
        if summary.requests < min_requests:
            reasons.append(f"{summary.requests} requests measured < {min_requests} required")
        if not summary.client.healthy:
            reasons.append(f"client unhealthy: {summary.client.reason}")
        out[tier.name] = TierVerdict(passed=not reasons, reasons=reasons, ttft_s=ttft)
    return out


def _session_share(summary: TrialSummary, tier: Tier) -> dict[str, Any] | None:
    block = (summary.sessions or {}).get("tiers") or {}
    found = block.get(tier.name)
    return found if isinstance(found, dict) else None


def _session_reasons(summary: TrialSummary, tier: Tier) -> list[str]:
    """The sessions criterion: at least ``min_session_share`` of the window's sessions met
    the tier (each on its own p25 speed and TTFT percentile)."""
    share = _session_share(summary, tier)
    if share is None or share.get("share") is None:
        return ["no session measured in the window"]
    if share["share"] < tier.min_session_share:
        return [
            f"{share['met']} of {share['sessions']} sessions met the tier "
            f"({share['share']:.1%} < {tier.min_session_share:.1%})"
        ]
    return []


def mark_marginal(
    verdicts: dict[str, TierVerdict],
    tiers: Sequence[Tier],
    intervals: dict[str, Interval],
    summary: TrialSummary,
    *,
    min_requests: int,
) -> None:
    """Set ``marginal`` on each verdict whose statistic's interval straddles its threshold
    while no non-statistical condition (errors, too few requests, client health) decided it."""
    for tier in tiers:
        verdict = verdicts.get(tier.name)
        if verdict is None:
            continue
        decided = (
            summary.error_rate > tier.max_error_rate
            or summary.requests < min_requests
            or not summary.client.healthy
        )
        if decided:
            continue
        if tier.criterion == SESSION_CRITERION_SESSIONS:
            share = _session_share(summary, tier) or {}
            low, high = share.get("low"), share.get("high")
            verdict.marginal = (
                low is not None
                and high is not None
                and low < high
                and low <= tier.min_session_share <= high
            )
            continue
        speed = intervals.get("p25_output_speed")
        ttft = intervals.get(f"ttft_p{tier.ttft_percentile:g}")
        verdict.marginal = bool(
            (speed is not None and speed.straddles(tier.min_p25_output_speed))
            or (ttft is not None and ttft.straddles(tier.max_ttft_s))
        )


def session_concurrency(
    records: Sequence[RequestRecord], *, window_start_ns: int, window_end_ns: int
) -> dict[str, Any]:
    """Concurrent sessions over the window [W0, W1) (docs/engine.md "Arrival modes").

    A session is in progress from its first request's send to its last request's end
    (tool delays between turns included): ``mean`` is the time average of the count over
    the window, ``peak`` its largest value, ``sessions`` how many overlapped the window.
    """
    w0, w1 = window_start_ns, window_end_ns
    spans: dict[str, list[int]] = {}
    for r in records:
        end = r.t_end_ns if r.t_end_ns is not None else r.t_send_ns
        span = spans.get(r.session_id)
        if span is None:
            spans[r.session_id] = [r.t_send_ns, max(end, r.t_send_ns)]
        else:
            span[0] = min(span[0], r.t_send_ns)
            span[1] = max(span[1], end)
    events: list[tuple[int, int]] = []
    for a, b in spans.values():
        lo, hi = max(a, w0), min(b, w1)
        if lo < hi:
            events.append((lo, 1))
            events.append((hi, -1))
    events.sort()  # at equal times an end (-1) comes before a start (+1)
    current = peak = 0
    area = 0
    last = w0
    for t, step in events:
        area += current * (t - last)
        last = t
        current += step
        peak = max(peak, current)
    area += current * (w1 - last)
    return {
        "mean": area / (w1 - w0) if w1 > w0 else 0.0,
        "peak": peak,
        "sessions": len(events) // 2,
    }


@dataclass(slots=True)
class TrialConfig:
    concurrency: int
    warmup_s: float
    duration_s: float
    accelerators: int
    replay: ReplayConfig
    accelerators_total: int | None = None
    min_requests: int = 20
    max_loop_lag_ms: float = 25.0
    max_cpu_percent: float = 90.0
    bootstrap_resamples: int = DEFAULT_RESAMPLES  # 0: no intervals, no marginal verdicts
    bootstrap_confidence: float = DEFAULT_CONFIDENCE

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "warmup_s": self.warmup_s,
            "duration_s": self.duration_s,
            "accelerators": self.accelerators,
            "accelerators_total": self.accelerators_total,
            "min_requests": self.min_requests,
            "max_loop_lag_ms": self.max_loop_lag_ms,
            "max_cpu_percent": self.max_cpu_percent,
            "bootstrap_resamples": self.bootstrap_resamples,
            "bootstrap_confidence": self.bootstrap_confidence,
            "replay": self.replay.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialConfig:
        """The inverse of ``to_dict``."""
        fields_ = {f: data[f] for f in cls.__dataclass_fields__ if f in data and f != "replay"}
        return cls(replay=ReplayConfig.from_dict(data["replay"]), **fields_)


@dataclass(slots=True)
class TrialResult:
    config: TrialConfig
    summary: TrialSummary
    verdicts: dict[str, TierVerdict]
    records: list[RequestRecord]
    simulated: bool = False
    # Bootstrap intervals and the MLPerf-style minimum request counts (engine.stats)
    statistics: dict[str, Any] = field(default_factory=dict)
    # A sharded trial's shards: agents, health, clock offsets (engine.sharding); {}: one process
    load_generator: dict[str, Any] = field(default_factory=dict)
    # How the sessions arrived and how many ran at once (docs/engine.md "Arrival modes")
    arrival: dict[str, Any] = field(default_factory=dict)
    # A mean-field trial (engine.meanfield): the factor k and the whole trial's concurrency
    # and accelerators it stands for; ``config`` is the 1/k slice that ran. {}: run whole.
    mean_field: dict[str, Any] = field(default_factory=dict)

    @property
    def concurrency(self) -> int:
        return self.config.concurrency

    def to_dict(self) -> dict[str, Any]:
        """trial.json: everything but the raw records (those go to requests.jsonl)."""
        return {
            "concurrency": self.mean_field.get("concurrency", self.config.concurrency),
            "simulated": self.simulated,
            "config": self.config.to_dict(),
            "summary": self.summary.to_dict(),
            "verdicts": {name: v.to_dict() for name, v in self.verdicts.items()},
            "statistics": self.statistics,
            **({"load_generator": self.load_generator} if self.load_generator else {}),
            **({"arrival": self.arrival} if self.arrival else {}),
            **({"mean_field": self.mean_field} if self.mean_field else {}),
            "frontier_point": {
                "p25_output_speed": self.summary.p25_output_speed,
                "throughput_per_accelerator": self.summary.throughput_per_accelerator,
            },
        }


def write_trial(out_dir: str | os.PathLike[str], result: TrialResult) -> None:
    """DIR/trial.json and DIR/requests.jsonl (one RequestRecord per line)."""
    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    rawrecords.write(path / "requests.jsonl", result.records)
    (path / "trial.json").write_bytes(
        orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2) + b"\n"
    )


async def run_trial(
    transport: Transport,
    clock: Clock,
    trajectories: Sequence[Trajectory],
    config: TrialConfig,
    tiers: Sequence[Tier] = (),
    *,
    on_record: Callable[[RequestRecord], None] | None = None,
    on_window: Callable[[str, int], None] | None = None,
) -> TrialResult:
    """Run one trial and judge it against ``tiers``.

    ``on_window(mark, t_ns)`` is called at the window's start ("start") and end ("end"),
    e.g. to scrape the server's /metrics for counter deltas over exactly the window; it must
    not block (start a thread for I/O).
    """
    if config.duration_s <= 0:
        raise ValueError("duration must be > 0")
    replay = Replay(
        transport, clock, trajectories, config.replay, config.concurrency, on_record=on_record
    )
    t0 = clock.now_ns()
    w0 = t0 + int(config.warmup_s * NS)
    w1 = w0 + int(config.duration_s * NS)
    lags: list[float] = []
    cpu: list[float] = []
    stamps: list[float] = []
    monitor = None
    if not clock.is_virtual:
        monitor = asyncio.ensure_future(monitor_health(clock, w0, w1, lags, cpu, stamps))
    marks = None
    if on_window is not None:
        marks = asyncio.ensure_future(window_marks(clock, w0, w1, on_window))
    try:
        records = await replay.run(stop_sending_at_ns=w1)
        if monitor is not None:
            await monitor
        if marks is not None:
            await marks
    finally:
        if monitor is not None:
            monitor.cancel()
        if marks is not None:
            marks.cancel()
    health: ClientHealth = judge_client_health(
        percentile(lags, 99) if lags else None,
        cpu[0] if cpu else None,
        percentile(stamps, 99) if stamps else None,
        max_loop_lag_ms=config.max_loop_lag_ms,
        max_cpu_percent=config.max_cpu_percent,
    )
    return judge_trial(
        records,
        config,
        tiers,
        window=(w0, w1),
        client=health,
        simulated=clock.is_virtual,
        trajectory_turns={t.id: len(t.turns) for t in trajectories},
        trajectories=trajectories,
    )


def judge_trial(
    records: list[RequestRecord],
    config: TrialConfig,
    tiers: Sequence[Tier],
    *,
    window: tuple[int, int],
    client: ClientHealth,
    simulated: bool,
    load_generator: dict[str, Any] | None = None,
    trajectory_turns: dict[str, int] | None = None,
    trajectories: Sequence[Trajectory] | None = None,
) -> TrialResult:
    """Summary, verdicts and bootstrap intervals of a trial's records, computed once (one
    process, or the merged records of every shard: docs/engine.md "Sharded trials").
    With the ``trajectories`` replayed, the summary carries the trial's cache truth
    (docs/metrics.md "Cache truth"; the server's counters are judged where scraped)."""
    w0, w1 = window
    extra_ps = {t.ttft_percentile for t in tiers}
    summary = summarize(
        records,
        window_start_ns=w0,
        window_end_ns=w1,
        accelerators=config.accelerators,
        accelerators_total=config.accelerators_total,
        client=client,
        extra_ttft_percentiles=extra_ps,
    )
    summary.sessions = summarize_sessions(
        records,
        tiers,
        window_start_ns=w0,
        window_end_ns=w1,
        resamples=config.bootstrap_resamples,
        confidence=config.bootstrap_confidence,
        seed=config.replay.seed,
        trajectory_turns=trajectory_turns,
    )
    if trajectories is not None:
        summary.cache_truth = summarize_cache_truth(
            records, trajectories, window_start_ns=w0, window_end_ns=w1
        )
    verdicts = evaluate_tiers(summary, tiers, min_requests=config.min_requests)
    statistics: dict[str, Any] = {}
    if config.bootstrap_resamples > 0:
        intervals = trial_intervals(
            records,
            window_start_ns=w0,
            window_end_ns=w1,
            ttft_percentiles=extra_ps or {75.0},
            resamples=config.bootstrap_resamples,
            confidence=config.bootstrap_confidence,
            seed=config.replay.seed,
            accelerators=config.accelerators,
        )
        mark_marginal(verdicts, tiers, intervals, summary, min_requests=config.min_requests)
        statistics = {
            "intervals": {k: v.to_dict() for k, v in intervals.items()},
            "min_requests": min_requests_table({25.0, *(extra_ps or {75.0})}),
            "marginal": sorted(n for n, v in verdicts.items() if v.marginal),
        }
    arrival: dict[str, Any] = {
        "mode": config.replay.arrival,
        "concurrent_sessions": session_concurrency(records, window_start_ns=w0, window_end_ns=w1),
    }
    if config.replay.arrival == ARRIVAL_OPEN:
        arrival["rate_per_min"] = config.replay.rate_per_min
        arrival["sessions_scheduled"] = config.concurrency
    return TrialResult(
        config=config,
        summary=summary,
        verdicts=verdicts,
        records=sorted(records, key=lambda r: r.t_send_ns),
        simulated=simulated,
        statistics=statistics,
        load_generator=load_generator or {},
        arrival=arrival,
    )


async def window_marks(
    clock: Clock, w0: int, w1: int, on_window: Callable[[str, int], None]
) -> None:
    """Call ``on_window("start"|"end", now)`` at the window's start and end."""
    for mark, t_ns in (("start", w0), ("end", w1)):
        wait = t_ns - clock.now_ns()
        if wait > 0:
            await clock.sleep(wait / NS)
        on_window(mark, clock.now_ns())
