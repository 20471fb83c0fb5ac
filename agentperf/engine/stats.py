"""Statistics that hold up: bootstrap intervals by agent session, and how many requests a
percentile needs (docs/verification.md "Statistics").

Pure functions of records; seeded, so the same records give the same interval.

- **Bootstrap by session.** The turns of one agent session are correlated (same repository,
  growing context, same cache), so resampling single requests would understate the spread.
  Each resample draws sessions with replacement and keeps all of a drawn session's
  requests; the statistic (nearest-rank percentile, as in ``metrics``) is recomputed, and
  the interval is the percentile interval of the resampled statistics.
- **Minimum requests (MLPerf-style).** The smallest n for which, with the stated
  confidence, the true p-quantile lies between the measured (p − margin) and (p + margin)
  nearest-rank percentiles. Distribution-free: the number of measurements below the true
  quantile is Binomial(n, p), so the coverage is P(a ≤ Binomial(n, p) < b) with
  a = ceil((p − margin)·n), b = ceil((p + margin)·n) (exact sum, no normal approximation;
  MLPerf's normal-approximation count is returned beside it for comparison).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agentperf.engine.metrics import NS, RequestRecord, attributed_tokens, percentile
from agentperf.engine.resample import batched_counts, bootstrap_rng

DEFAULT_RESAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95
MIN_REQUESTS_CONFIDENCE = 0.99
MIN_REQUESTS_MARGIN = 0.05


@dataclass(slots=True)
class Interval:
    """A statistic, its bootstrap interval, and what it was computed from."""

    name: str
    estimate: float
    low: float
    high: float
    confidence: float
    sessions: int
    requests: int
    resamples: int

    @property
    def width(self) -> float:
        return self.high - self.low

    def straddles(self, threshold: float) -> bool:
        """True when the threshold lies inside the interval (the verdict could go either way)."""
        return self.low < threshold < self.high or (
            self.low < self.high and threshold in (self.low, self.high)
        )

    def to_dict(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return None if math.isinf(x) or math.isnan(x) else x

        return {
            "name": self.name,
            "estimate": num(self.estimate),
            "low": num(self.low),
            "high": num(self.high),
            "width": num(self.width) if not math.isnan(self.width) else None,
            "confidence": self.confidence,
            "sessions": self.sessions,
            "requests": self.requests,
            "resamples": self.resamples,
        }


def group_by_session(records: Iterable[RequestRecord]) -> list[list[RequestRecord]]:
    """Records grouped by agent session (agent id + session id), in first-seen order."""
    groups: dict[tuple[int, str], list[RequestRecord]] = {}
    for r in records:
        key = (r.agent_id, r.session_id)
        group = groups.get(key)
        if group is None:
            groups[key] = [r]
        else:
            group.append(r)
    return list(groups.values())


def _speed_values(records: Sequence[RequestRecord]) -> list[float]:
    out: list[float] = []
    for r in records:
        s = r.output_speed
        if s is not None:
            out.append(s)
    return out


def _ttft_values(records: Sequence[RequestRecord]) -> list[float]:
    return [r.ttft_s for r in records]


def bootstrap_interval(
    groups: Sequence[Sequence[RequestRecord]],
    values: Callable[[Sequence[RequestRecord]], list[float]],
    p: float,
    *,
    name: str,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> Interval:
    """The nearest-rank p-th percentile of ``values`` over all groups, with a bootstrap
    percentile interval from resampling whole groups with replacement."""
    if not 0 < confidence < 1:
        raise ValueError("confidence must be in (0, 1)")
    per_group = [values(g) for g in groups]
    everything = [v for vs in per_group for v in vs]
    n_req = sum(len(g) for g in groups)
    if not everything:
        nan = math.nan
        return Interval(name, nan, nan, nan, confidence, len(groups), n_req, 0)
    estimate = percentile(everything, p)
    if len(per_group) < 2 or resamples < 1:
        return Interval(name, estimate, estimate, estimate, confidence, len(groups), n_req, 0)
    stats = _resampled_percentiles(per_group, p, resamples, bootstrap_rng(seed, name))
    stats.sort()
    alpha = (1 - confidence) / 2
    low = stats[max(0, math.ceil(alpha * len(stats)) - 1)]
    high = stats[min(len(stats) - 1, math.ceil((1 - alpha) * len(stats)) - 1)]
    return Interval(name, estimate, low, high, confidence, len(groups), n_req, len(stats))


@functools.cache
def _blas_controller() -> Any:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def one_blas_thread() -> Any:  # a context manager (threadpoolctl is untyped)
    """BLAS on one thread for a float dot product of a bootstrap (docs/engine.md "Bootstrap
    arithmetic"): above 10,000 elements OpenBLAS splits a dot product over its threads and
    adds the partial sums, so the value would depend on the machine's core count, and on a
    busy machine each call waits for threads the scheduler has not run (~4 ms against
    0.03 ms for 25,000 elements on this project's 2-core machine)."""
    import numpy  # noqa: F401  (loaded first, so the controller sees its BLAS)

    return _blas_controller().limit(limits=1, user_api="blas")


def _resampled_percentiles(
    per_group: Sequence[Sequence[float]], p: float, resamples: int, rng: Any
) -> list[float]:
    """The nearest-rank p-th percentile of each resample (groups drawn with replacement,
    ``rng.integers(0, k, size=k)`` per resample).

    The same draws and the same values as concatenating each resample's groups and sorting
    them, without building the sample: every value is sorted once with its group; a resample
    is a count per group, and its rank-r value is the first sorted value whose cumulative
    count (each value weighted by its group's count) reaches r. That cumulative count is
    summed exactly (integers) up to a band around the overall rank, and walked value by
    value only inside the band; a resample whose rank falls outside it is walked in full.
    """
    import numpy as np

    k = len(per_group)
    size_arr = np.array([len(vs) for vs in per_group], dtype=np.int64)
    n = int(size_arr.sum())
    flat = np.fromiter((v for vs in per_group for v in vs), dtype=np.float64, count=n)
    gid = np.repeat(np.arange(k, dtype=np.int64), size_arr)
    order = np.lexsort((gid, flat))  # as sorting (value, group) pairs
    values = flat[order]
    group_of = gid[order]
    mid = max(0, math.ceil(p / 100 * n) - 1)
    half = max(512, n // 40)
    j0, j1 = max(0, mid - half), min(n, mid + half + 1)
    below = np.bincount(group_of[:j0], minlength=k)  # each group's values before the band
    band = group_of[j0:j1]
    out: list[float] = []
    q = p / 100
    if not n:  # no values: every resample is empty (and skipped)
        return []
    for counts in batched_counts(rng, k, resamples):
        totals = (counts @ size_arr).tolist()
        ranks = np.array([max(1, math.ceil(q * t)) for t in totals], dtype=np.int64)
        base = counts @ below  # weighted count of the values before the band
        reached = np.cumsum(counts[:, band], axis=1)
        reached += base[:, None]
        inside = (base < ranks) & (ranks <= reached[:, -1])
        at = j0 + (reached >= ranks[:, None]).argmax(axis=1)  # first index reaching the rank
        for i, total in enumerate(totals):
            if not total:
                continue
            if inside[i]:
                j = int(at[i])
            else:  # outside the band: the whole walk
                j = int(np.searchsorted(np.cumsum(counts[i][group_of]), ranks[i]))
            out.append(float(values[j]))
    return out


def throughput_interval(
    records: Sequence[RequestRecord],
    *,
    window_start_ns: int,
    window_end_ns: int,
    accelerators: int,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> Interval:
    """Throughput per accelerator (tokens inside the window, as ``metrics.summarize`` counts
    them, ÷ window ÷ accelerators) with a bootstrap interval: each resample draws agent
    sessions with replacement and sums the drawn sessions' tokens."""
    name = "throughput_per_accelerator"
    if not 0 < confidence < 1:
        raise ValueError("confidence must be in (0, 1)")
    w0, w1 = window_start_ns, window_end_ns
    scale = NS / (w1 - w0) / max(1, accelerators)
    groups = group_by_session(records)
    totals = [sum(sum(attributed_tokens(r, w0, w1)) for r in g) * scale for g in groups]
    n_req = sum(1 for r in records if w0 <= r.t_send_ns < w1)
    estimate = sum(totals)
    if len(totals) < 2 or resamples < 1:
        return Interval(name, estimate, estimate, estimate, confidence, len(groups), n_req, 0)
    import numpy as np

    rng = bootstrap_rng(seed, name)
    values = np.array(totals, dtype=np.float64)
    k = len(totals)
    # Each resample's sum is ``counts @ values`` as it was one at a time: numpy casts the
    # integer counts to floats and takes one BLAS dot product; the same dot product of the
    # same floats, row by row (a matrix product could sum in another order and round
    # differently), without casting every row on its own.
    with one_blas_thread():
        stats = sorted(
            float(np.dot(row, values))
            for batch in batched_counts(rng, k, resamples)
            for row in batch.astype(np.float64)
        )
    alpha = (1 - confidence) / 2
    low = stats[max(0, math.ceil(alpha * len(stats)) - 1)]
    high = stats[min(len(stats) - 1, math.ceil((1 - alpha) * len(stats)) - 1)]
    return Interval(name, estimate, low, high, confidence, len(groups), n_req, len(stats))


def trial_intervals(
    records: Sequence[RequestRecord],
    *,
    window_start_ns: int,
    window_end_ns: int,
    ttft_percentiles: Iterable[float] = (75.0,),
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
    accelerators: int | None = None,
) -> dict[str, Interval]:
    """Intervals for a trial's p25 output speed and each TTFT percentile, over the requests
    sent inside the window (failed requests count as speed 0 and TTFT +inf, as in
    ``metrics.summarize``); with ``accelerators``, also for throughput per accelerator
    (the frontier point's y, so a chart can draw both error bars)."""
    sent = [r for r in records if window_start_ns <= r.t_send_ns < window_end_ns]
    groups = group_by_session(sent)
    out = {
        "p25_output_speed": bootstrap_interval(
            groups,
            _speed_values,
            25,
            name="p25_output_speed",
            resamples=resamples,
            confidence=confidence,
            seed=seed,
        )
    }
    for p in sorted(set(ttft_percentiles)):
        key = f"ttft_p{p:g}"
        out[key] = bootstrap_interval(
            groups, _ttft_values, p, name=key, resamples=resamples, confidence=confidence, seed=seed
        )
    if accelerators is not None:
        out["throughput_per_accelerator"] = throughput_interval(
            records,
            window_start_ns=window_start_ns,
            window_end_ns=window_end_ns,
            accelerators=accelerators,
            resamples=resamples,
            confidence=confidence,
            seed=seed,
        )
    return out


def _log_binom_pmf(n: int, k: int, logp: float, logq: float) -> float:
    return (
        math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * logp + (n - k) * logq
    )


def percentile_coverage(n: int, p: float, margin: float) -> float:
    """P(the true p-quantile lies between the measured (p − margin) and (p + margin)
    nearest-rank percentiles of n measurements), for any continuous distribution."""
    if n < 1:
        return 0.0
    # With C measurements below the true quantile q (C ~ Binomial(n, p)), the rank-r value
    # X_(r) <= q exactly when C >= r; so q lies in [X_(a), X_(b)] when a <= C <= b - 1.
    a = max(1, math.ceil((p - margin) * n))
    b = min(n, math.ceil((p + margin) * n))
    lo, hi = a, b
    logp, logq = math.log(p), math.log1p(-p)
    return sum(math.exp(_log_binom_pmf(n, k, logp, logq)) for k in range(lo, hi))


@functools.lru_cache(maxsize=64)
def min_requests(
    p: float,
    *,
    confidence: float = MIN_REQUESTS_CONFIDENCE,
    margin: float = MIN_REQUESTS_MARGIN,
    limit: int = 1_000_000,
) -> int:
    """Smallest n whose (p ± margin) percentile band holds the true p-quantile with
    ``confidence`` (``p`` as a fraction, 0.25 for p25)."""
    if not 0 < p < 1:
        raise ValueError("p must be in (0, 1)")
    if not 0 < margin < min(p, 1 - p) + 1e-12:
        raise ValueError("margin must be in (0, min(p, 1 - p))")
    # Below half the normal-approximation count the coverage is far from any useful
    # confidence, so the exact scan starts there (coverage is not monotone in n: the ranks
    # round, so the first n that reaches the confidence is returned).
    start = max(1, mlperf_min_requests(p, confidence=confidence, margin=margin) // 2)
    for n in range(start, limit + 1):
        if percentile_coverage(n, p, margin) >= confidence:
            return n
    raise ValueError(f"no n <= {limit} reaches the confidence")


def mlperf_min_requests(p: float, *, confidence: float, margin: float) -> int:
    """MLPerf's normal-approximation count: z² · p(1 − p) / margin², z two-sided."""
    z = _norm_ppf(1 - (1 - confidence) / 2)
    return math.ceil(z * z * p * (1 - p) / (margin * margin))


def _norm_ppf(q: float) -> float:
    """Inverse standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9)."""
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02,
         1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00)  # fmt: skip
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02,
         6.680131188771972e01, -1.328068155288572e01)  # fmt: skip
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
         -2.549732539343734e00, 4.374664141464968e00, 2.938163982698783e00)  # fmt: skip
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00,
         3.754408661907416e00)  # fmt: skip
    if not 0 < q < 1:
        raise ValueError("q must be in (0, 1)")
    lo = 0.02425
    if q < lo:
        t = math.sqrt(-2 * math.log(q))
        return (((((c[0] * t + c[1]) * t + c[2]) * t + c[3]) * t + c[4]) * t + c[5]) / (
            (((d[0] * t + d[1]) * t + d[2]) * t + d[3]) * t + 1
        )
    if q > 1 - lo:
        return -_norm_ppf(1 - q)
    r = q - 0.5
    s = r * r
    return (
        (((((a[0] * s + a[1]) * s + a[2]) * s + a[3]) * s + a[4]) * s + a[5])
        * r
        / (((((b[0] * s + b[1]) * s + b[2]) * s + b[3]) * s + b[4]) * s + 1)
    )


def min_requests_table(
    percentiles: Iterable[float],
    *,
    confidence: float = MIN_REQUESTS_CONFIDENCE,
    margin: float = MIN_REQUESTS_MARGIN,
) -> dict[str, dict[str, Any]]:
    """{"p25": {"min_requests", "mlperf_normal_approx", "confidence", "margin"}, ...}; the
    margin is ``margin`` but at most half the distance to 0 or 100%."""
    out: dict[str, dict[str, Any]] = {}
    for pct in sorted(set(percentiles)):
        p = pct / 100
        # a tail percentile gets a proportionally tighter band (p99: ±0.5 points)
        m = round(min(margin, p / 2, (1 - p) / 2), 6)
        out[f"p{pct:g}"] = {
            "min_requests": min_requests(p, confidence=confidence, margin=m),
            "mlperf_normal_approx": mlperf_min_requests(p, confidence=confidence, margin=m),
            "confidence": confidence,
            "margin": m,
        }
    return out
