"""Per-request records and the trial summary, exactly as docs/engine.md "Definitions"
defines them.

Everything here is a pure function of records: no clocks, no I/O beyond (de)serialising.

Percentiles use the nearest-rank definition (Hyndman & Fan type 1): the p-th percentile of
n values is the ``ceil(p/100 * n)``-th smallest (the smallest for p = 0). It is always one of
the measured values, it is well defined with the +inf TTFT of failed requests, and it gives
the tier semantics exactly: with speed p25 = s, at least 75% of requests were at least s
fast; with TTFT p75 = t, at least 75% of requests had their first token within t.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from agentperf.engine.cachetruth import CacheTruth
from agentperf.engine.reasons import ErrorReason, error_reasons
from agentperf.engine.resample import batched_counts, bootstrap_rng
from agentperf.engine.transport import Exchange, RequestSpec

NS = 1_000_000_000
TTFT_PERCENTILES = (50, 75, 90, 95, 99)


@dataclass(slots=True)
class RequestRecord:
    """One request as stored in requests.jsonl (times: monotonic ns, same clock for all)."""

    request_id: str
    agent_id: int
    session_id: str
    trajectory_id: str
    turn_index: int
    target_output_tokens: int
    t_send_ns: int
    t_first_ns: int | None
    t_last_ns: int | None
    t_end_ns: int | None
    n_reads: int
    n_output_events: int
    n_in: int | None
    n_out: int | None
    n_cached: int | None
    local_prompt_tokens: int | None
    ok: bool
    error_class: str | None = None
    error_detail: str = ""
    http_status: int | None = None
    finish_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Local offline (cl100k) count of the streamed output text: the cross-check of n_out
    # (None when the load generator did not count it).
    local_output_tokens: int | None = None

    @classmethod
    def from_exchange(
        cls,
        spec: RequestSpec,
        ex: Exchange,
        *,
        count_tokens: Callable[[str], int] | None = None,
    ) -> RequestRecord:
        local = sum(spec.message_tokens) if spec.message_tokens is not None else None
        extra = (
            {k: v for k, v in ex.extra.items() if k in ("server_timings", "sse_events")}
            if ex.extra
            else {}
        )
        local_out = None
        if count_tokens is not None and ex.error_class is None:
            local_out = count_tokens(ex.reasoning + ex.content + ex.tool_calls_text)
        return cls(
            request_id=spec.request_id,
            agent_id=spec.agent_id,
            session_id=spec.session_id,
            trajectory_id=spec.trajectory_id,
            turn_index=spec.turn_index,
            target_output_tokens=spec.target_output_tokens,
            t_send_ns=ex.t_send_ns,
            t_first_ns=ex.t_first_ns,
            t_last_ns=ex.t_last_ns,
            t_end_ns=ex.t_end_ns,
            n_reads=ex.n_reads,
            n_output_events=ex.n_output_events,
            n_in=ex.prompt_tokens,
            n_out=ex.completion_tokens,
            n_cached=ex.cached_tokens,
            local_prompt_tokens=local,
            ok=ex.ok,
            error_class=ex.error_class,
            error_detail=ex.error_detail[:500],
            http_status=ex.http_status,
            finish_reason=ex.finish_reason,
            extra=extra,
            local_output_tokens=local_out,
        )

    @property
    def ttft_s(self) -> float:
        """Time to first token; +inf for a failed request (docs/engine.md "Definitions")."""
        if not self.ok or self.t_first_ns is None:
            return math.inf
        return (self.t_first_ns - self.t_send_ns) / NS

    @property
    def output_speed(self) -> float | None:
        """(n_out - 1) / (t_last - t_first) in tokens/s; 0 if failed; None if undefined."""
        if not self.ok:
            return 0.0
        if self.n_out is None or self.n_out < 2 or self.t_first_ns is None:
            return None
        if self.t_last_ns is None or self.t_last_ns <= self.t_first_ns:
            return None  # the whole output arrived in one read
        return (self.n_out - 1) * NS / (self.t_last_ns - self.t_first_ns)

    def to_dict(self) -> dict[str, Any]:
        # What dataclasses.asdict gives (extra deep-copied), without its generic recursion:
        # a trial writes every record, and asdict was most of write_trial's time.
        data = {name: getattr(self, name) for name in _RECORD_FIELDS}
        data["extra"] = copy.deepcopy(self.extra) if self.extra else {}  # keeps its place
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


_RECORD_FIELDS = tuple(f.name for f in fields(RequestRecord))


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (see the module docstring); NaN for no values."""
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} outside [0, 100]")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def overlap_ns(a0: int, a1: int, w0: int, w1: int) -> int:
    """Length of [a0, a1] ∩ [w0, w1] in ns (0 when disjoint)."""
    return max(0, min(a1, w1) - max(a0, w0))


def attributed_tokens(record: RequestRecord, w0: int, w1: int) -> tuple[float, float]:
    """(input, output) tokens of ``record`` that fall inside the window [w0, w1).

    Input (cached included) counts at t_first; output is spread uniformly over
    [t_first, t_last] (all at t_first when they coincide). Only successful requests count.
    """
    if not record.ok or record.t_first_ns is None:
        return 0.0, 0.0
    t_first = record.t_first_ns
    t_last = record.t_last_ns if record.t_last_ns is not None else t_first
    n_in = float(record.n_in or 0) if w0 <= t_first < w1 else 0.0
    n_out = float(record.n_out or 0)
    if t_last <= t_first:
        out = n_out if w0 <= t_first < w1 else 0.0
    else:
        out = n_out * overlap_ns(t_first, t_last, w0, w1) / (t_last - t_first)
    return n_in, out


class ClientHealth(BaseModel):
    """The load generator's own state during the window; None fields were not measured.

    The contract's ``ClientHealth`` (agentperf/contract.py) is this model with every field
    required and nothing coerced: the trial report carries it as built here."""

    model_config = ConfigDict(extra="forbid")

    loop_lag_p99_ms: float | None = None
    cpu_percent: float | None = None
    healthy: bool = True
    reason: str = ""
    # How late the loop stamped a socket read's arrival (engine.health.StampProbe), p99
    stamp_delay_p99_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def judge_client_health(
    loop_lag_p99_ms: float | None,
    cpu_percent: float | None,
    stamp_delay_p99_ms: float | None = None,
    *,
    max_loop_lag_ms: float = 25.0,
    max_cpu_percent: float = 90.0,
) -> ClientHealth:
    """Healthy when the loop lag and the stamping delay (p99 each) stay under
    ``max_loop_lag_ms`` and the CPU under ``max_cpu_percent``; None: not measured."""
    reasons = []
    if loop_lag_p99_ms is not None and loop_lag_p99_ms > max_loop_lag_ms:
        reasons.append(f"event-loop lag p99 {loop_lag_p99_ms:.1f} ms > {max_loop_lag_ms:g} ms")
    if stamp_delay_p99_ms is not None and stamp_delay_p99_ms > max_loop_lag_ms:
        reasons.append(
            f"first-token stamping delay p99 {stamp_delay_p99_ms:.1f} ms > {max_loop_lag_ms:g} ms"
        )
    if cpu_percent is not None and cpu_percent > max_cpu_percent:
        reasons.append(f"client CPU {cpu_percent:.0f}% > {max_cpu_percent:g}%")
    return ClientHealth(
        loop_lag_p99_ms=loop_lag_p99_ms,
        cpu_percent=cpu_percent,
        healthy=not reasons,
        reason="; ".join(reasons),
        stamp_delay_p99_ms=stamp_delay_p99_ms,
    )


Count = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(ge=1)]


class TrialSummary(BaseModel):
    """One trial's figures over its measurement window (docs/engine.md "Definitions").

    Declared once: the contract's ``TrialMetrics`` (agentperf/contract.py, what the worker
    reports and ``Trial.metrics`` stores) is this model, strict, plus the trial's bootstrap
    statistics, its load generator, and power; no field list is repeated there."""

    model_config = ConfigDict(extra="forbid")

    window_start_ns: int
    window_end_ns: int
    window_s: float
    requests: Count  # sent inside the window
    ok: Count
    failed: Count
    errors_by_class: dict[str, int]
    # the top reasons of the failed requests, with counts (docs/engine.md "Error reasons");
    # empty in a trial stored before reasons were summarised
    error_reasons: list[ErrorReason] = Field(default_factory=list)
    error_rate: float
    p25_output_speed: float
    median_output_speed: float
    ttft_s: dict[str, float]  # "p50".."p99"; infinite when a request failed
    cache_hit_ratio: float | None
    input_tokens: float
    output_tokens: float
    throughput_tok_s: float
    output_throughput_tok_s: float
    throughput_per_accelerator: float
    accelerators: Positive
    accelerators_total: Positive | None
    mean_in_flight: float
    client: ClientHealth
    requests_total: Count  # all records, warm-up and drain included
    speed_undefined: Count  # successful requests whose speed is undefined (n_out<2, one read)
    # The session block (summarize_sessions), set by the trial once it knows its tiers
    sessions: dict[str, Any] | None = None
    # Cache truth (engine.cachetruth, docs/metrics.md "Cache truth"), set by the trial when
    # it has the dataset; None: not summarised
    cache_truth: CacheTruth | None = None

    def ttft_at(self, p: float) -> float:
        key = f"p{p:g}"
        if key in self.ttft_s:
            return self.ttft_s[key]
        raise KeyError(f"TTFT percentile {p} not summarised")

    def to_dict(self) -> dict[str, Any]:
        out = self.model_dump()
        # JSON has no infinity: an infinite TTFT percentile (failures) is written as null
        out["ttft_s"] = {k: (None if math.isinf(v) else v) for k, v in self.ttft_s.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialSummary:
        data = dict(data)
        data["ttft_s"] = {k: (math.inf if v is None else v) for k, v in data["ttft_s"].items()}
        return cls.model_validate(data)


def summarize(
    records: Sequence[RequestRecord],
    *,
    window_start_ns: int,
    window_end_ns: int,
    accelerators: int,
    accelerators_total: int | None = None,
    client: ClientHealth | None = None,
    extra_ttft_percentiles: Iterable[float] = (),
) -> TrialSummary:
    """The trial summary (docs/engine.md "Definitions") over the window
    [window_start_ns, window_end_ns)."""
    if window_end_ns <= window_start_ns:
        raise ValueError("empty measurement window")
    if accelerators < 1:
        raise ValueError("accelerators must be >= 1")
    w0, w1 = window_start_ns, window_end_ns
    window_s = (w1 - w0) / NS
    sent = [r for r in records if w0 <= r.t_send_ns < w1]
    ok = [r for r in sent if r.ok]
    errors: dict[str, int] = {}
    for r in sent:
        if not r.ok:
            key = r.error_class or "unknown"
            errors[key] = errors.get(key, 0) + 1
    speeds: list[float] = []
    undefined = 0
    for r in sent:
        s = r.output_speed
        if s is None:
            undefined += 1
        else:
            speeds.append(s)
    ttfts = [r.ttft_s for r in sent]
    ps = sorted(set(TTFT_PERCENTILES) | set(extra_ttft_percentiles))
    cached_known = [r for r in ok if r.n_cached is not None and r.n_in]
    cache_ratio = (
        sum(r.n_cached or 0 for r in cached_known) / sum(r.n_in or 0 for r in cached_known)
        if cached_known
        else None
    )
    tok_in = tok_out = 0.0
    in_flight_ns = 0
    for r in records:
        a, b = attributed_tokens(r, w0, w1)
        tok_in += a
        tok_out += b
        end = r.t_end_ns if r.t_end_ns is not None else r.t_send_ns
        in_flight_ns += overlap_ns(r.t_send_ns, end, w0, w1)
    total = tok_in + tok_out
    return TrialSummary(
        window_start_ns=w0,
        window_end_ns=w1,
        window_s=window_s,
        requests=len(sent),
        ok=len(ok),
        failed=len(sent) - len(ok),
        errors_by_class=errors,
        error_reasons=error_reasons((r.error_class, r.error_detail) for r in sent if not r.ok),
        error_rate=(len(sent) - len(ok)) / len(sent) if sent else 0.0,
        p25_output_speed=percentile(speeds, 25) if speeds else 0.0,
        median_output_speed=percentile(speeds, 50) if speeds else 0.0,
        ttft_s={f"p{p:g}": (percentile(ttfts, p) if ttfts else math.inf) for p in ps},
        cache_hit_ratio=cache_ratio,
        input_tokens=tok_in,
        output_tokens=tok_out,
        throughput_tok_s=total / window_s,
        output_throughput_tok_s=tok_out / window_s,
        throughput_per_accelerator=total / window_s / accelerators,
        accelerators=accelerators,
        accelerators_total=accelerators_total,
        mean_in_flight=in_flight_ns / (w1 - w0),
        client=client or ClientHealth(),
        requests_total=len(records),
        speed_undefined=undefined,
    )


# --- sessions: what one agent's user felt (docs/engine.md "Session SLOs") -----------------

SESSION_CRITERION_REQUESTS = "requests"
SESSION_CRITERION_SESSIONS = "sessions"
SESSION_CRITERIA = (SESSION_CRITERION_REQUESTS, SESSION_CRITERION_SESSIONS)


class SessionTier(Protocol):
    """What a session is judged against (agentperf.engine.trial.Tier has these fields)."""

    @property
    def name(self) -> str: ...
    @property
    def min_p25_output_speed(self) -> float: ...
    @property
    def max_ttft_s(self) -> float: ...
    @property
    def ttft_percentile(self) -> float: ...


@dataclass(slots=True)
class SessionStats:
    """One session's own figures over the window (docs/engine.md "Session SLOs")."""

    agent_id: int
    session_id: str
    requests: int  # sent inside the window
    p25_output_speed: float  # 0 when none of its requests has a defined speed
    ttfts: list[float]  # every request's TTFT (+inf: failed), for any percentile

    def ttft_at(self, p: float) -> float:
        return percentile(self.ttfts, p) if self.ttfts else math.inf

    def meets(self, tier: SessionTier) -> bool:
        return (
            self.p25_output_speed >= tier.min_p25_output_speed
            and self.ttft_at(tier.ttft_percentile) <= tier.max_ttft_s
        )


def _session_key(r: RequestRecord) -> tuple[int, str]:
    return (r.agent_id, r.session_id)


def session_stats(
    records: Iterable[RequestRecord], *, window_start_ns: int, window_end_ns: int
) -> list[SessionStats]:
    """Each session (agent id + session id) with a request sent inside [W0, W1), in
    first-seen order, over its requests sent inside the window."""
    groups: dict[tuple[int, str], list[RequestRecord]] = {}
    for r in records:
        if window_start_ns <= r.t_send_ns < window_end_ns:
            groups.setdefault(_session_key(r), []).append(r)
    out: list[SessionStats] = []
    for (agent, session), rs in groups.items():
        speeds = [s for r in rs if (s := r.output_speed) is not None]
        out.append(
            SessionStats(
                agent_id=agent,
                session_id=session,
                requests=len(rs),
                p25_output_speed=percentile(speeds, 25) if speeds else 0.0,
                ttfts=[r.ttft_s for r in rs],
            )
        )
    return out


def whole_task_observations(
    records: Sequence[RequestRecord],
    *,
    window_start_ns: int,
    window_end_ns: int,
    trajectory_turns: Mapping[str, int] | None = None,
) -> list[tuple[float, bool]]:
    """(model time in s, ended) of every trajectory the trial saw begin (docs/engine.md
    "Session SLOs"): the sum of its requests' send-to-end times, tool delays excluded.

    A session counts when it has turn 0 and one of its requests was sent inside the window.
    It *ended* when its last turn is its trajectory's last (``trajectory_turns``: turns per
    trajectory id, when the caller knows them) or the same agent went on to a later session
    (an agent moves on only after a trajectory's last turn); otherwise it is the agent's last
    session, still running when the trial stopped, and its time so far is *censored*: the
    task took at least that long. A request with no end counts to its send."""
    by_agent: dict[int, list[tuple[int, tuple[int, str]]]] = {}
    groups: dict[tuple[int, str], list[RequestRecord]] = {}
    for r in records:
        key = _session_key(r)
        if key not in groups:
            groups[key] = []
            by_agent.setdefault(r.agent_id, []).append((r.t_send_ns, key))
        groups[key].append(r)
    out: list[tuple[float, bool]] = []
    turns = trajectory_turns or {}
    for sessions in by_agent.values():
        sessions.sort()
        for i, (_, key) in enumerate(sessions):
            rs = groups[key]
            if min(r.turn_index for r in rs) != 0:
                continue  # begun before the trial: its start was never seen
            if not any(window_start_ns <= r.t_send_ns < window_end_ns for r in rs):
                continue
            last = turns.get(rs[0].trajectory_id)
            reached_end = last is not None and max(r.turn_index for r in rs) >= last - 1
            ended = reached_end or i < len(sessions) - 1
            total = 0
            for r in rs:
                end = r.t_end_ns if r.t_end_ns is not None else r.t_send_ns
                total += max(0, end - r.t_send_ns)
            out.append((total / NS, ended))
    return out


def whole_task_model_times(
    records: Sequence[RequestRecord],
    *,
    window_start_ns: int,
    window_end_ns: int,
    trajectory_turns: Mapping[str, int] | None = None,
) -> list[float]:
    """Model time (s) of every whole trajectory the trial saw (the ended ones of
    ``whole_task_observations``)."""
    observed = whole_task_observations(
        records,
        window_start_ns=window_start_ns,
        window_end_ns=window_end_ns,
        trajectory_turns=trajectory_turns,
    )
    return [t for t, ended in observed if ended]


def kaplan_meier_quantile(observations: Sequence[tuple[float, bool]], q: float) -> float | None:
    """The q-quantile (0 < q ≤ 1) of task time by the Kaplan–Meier estimate over (time,
    ended) observations: the first ended time t where F(t) = 1 − S(t) reaches q, a censored
    time counting at risk up to and including its own. None when F never reaches q (too
    many tasks still running at that point to tell). With nothing censored it is the
    nearest-rank percentile (``percentile``)."""
    if not 0 < q <= 1:
        raise ValueError(f"quantile {q} outside (0, 1]")
    ordered = sorted(observations, key=lambda o: o[0])
    at_risk = len(ordered)
    survival = 1.0
    i = 0
    while i < len(ordered):
        t = ordered[i][0]
        j = i
        while j < len(ordered) and ordered[j][0] == t:
            j += 1
        ended = sum(1 for _, e in ordered[i:j] if e)
        if ended:
            survival *= 1 - ended / at_risk
            if 1 - survival >= q - 1e-12:
                return t
        at_risk -= j - i
        i = j
    return None


def share_interval(
    met: Sequence[bool], *, resamples: int, confidence: float, seed: int, name: str
) -> tuple[float, float]:
    """Session-bootstrap percentile interval of the share of ``met`` sessions: each
    resample draws sessions with replacement (engine.stats, seeded as its intervals)."""
    share = sum(met) / len(met) if met else math.nan
    if len(met) < 2 or resamples < 1:
        return share, share
    import numpy as np

    rng = bootstrap_rng(seed, name)
    ones = np.array([1 if m else 0 for m in met], dtype=np.int64)
    k = len(met)
    # Σ count × (1.0 or 0.0) in floats has only integers below 2**53 on the way, so it is
    # exactly the integer count of drawn sessions that met the tier, in whatever order summed
    stats = sorted(
        float(c) / k for batch in batched_counts(rng, k, resamples) for c in (batch @ ones).tolist()
    )
    alpha = (1 - confidence) / 2
    low = stats[max(0, math.ceil(alpha * len(stats)) - 1)]
    high = stats[min(len(stats) - 1, math.ceil((1 - alpha) * len(stats)) - 1)]
    return low, high


def summarize_sessions(
    records: Sequence[RequestRecord],
    tiers: Sequence[SessionTier],
    *,
    window_start_ns: int,
    window_end_ns: int,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    trajectory_turns: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The trial's session block (``TrialSummary.sessions``, docs/engine.md "Session SLOs"):
    per tier, how many of the window's sessions met it and the share with its
    session-bootstrap interval; the whole-task model time per session (median, p90)."""
    stats = session_stats(records, window_start_ns=window_start_ns, window_end_ns=window_end_ns)
    per_tier: dict[str, dict[str, Any]] = {}
    for tier in tiers:
        met = [s.meets(tier) for s in stats]
        share = sum(met) / len(met) if met else None
        low, high = share_interval(
            met,
            resamples=resamples,
            confidence=confidence,
            seed=seed,
            name=f"session_share:{tier.name}",
        )
        per_tier[tier.name] = {
            "met": sum(met),
            "sessions": len(met),
            "share": share,
            "low": None if share is None else low,
            "high": None if share is None else high,
            "confidence": confidence,
        }
    observed = whole_task_observations(
        records,
        window_start_ns=window_start_ns,
        window_end_ns=window_end_ns,
        trajectory_turns=trajectory_turns,
    )
    ended = sum(1 for _, e in observed if e)
    return {
        "sessions": len(stats),
        "tiers": per_tier,
        # Kaplan–Meier over ended and censored tasks (docs/metrics.md "Whole-task time")
        "whole_task_model_time_s": {
            "sessions": ended,
            "censored": len(observed) - ended,
            "median": kaplan_meier_quantile(observed, 0.5) if ended else None,
            "p90": kaplan_meier_quantile(observed, 0.9) if ended else None,
        },
    }
