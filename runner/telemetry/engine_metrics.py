"""The serving engine's own gauges and counters over the run, from its Prometheus /metrics
(docs/pipeline.md "Engine metrics").

A background thread scrapes the launched server's /metrics every `interval_s` between
start() and stop() (through the sandbox's or container's network namespace, like every
request), stamping each scrape with `time.perf_counter_ns()`, the clock the engine measures
trials with; `window(w0, w1)` gives a trial's series over exactly its measurement window:

- vLLM: prefix-cache queries and hits (tokens, cumulative), running and waiting requests,
  KV-cache usage (0-1) and preemptions (cumulative);
- llama.cpp: requests processing and deferred, and its KV-cache usage ratio where it has one.

Counters are kept as read (cumulative from the server's start); a reader takes differences.
A scrape that fails is counted, never filled in.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

# our series name -> the engine's metric names (the first one a server reports is used)
SERIES: Mapping[str, tuple[str, ...]] = {
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total",),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total",),
    "running": ("vllm:num_requests_running", "llamacpp:requests_processing"),
    "waiting": ("vllm:num_requests_waiting", "llamacpp:requests_deferred"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "llamacpp:kv_cache_usage_ratio"),
    "preemptions": ("vllm:num_preemptions_total",),
}
COUNTERS = frozenset({"prefix_cache_queries", "prefix_cache_hits", "preemptions"})
# a fraction of each engine's own KV cache: averaged over vLLM's data-parallel engines
# (equal caches), never added past 1
FRACTIONS = frozenset({"kv_cache_usage"})
MAX_POINTS = 2000  # per series in one window: a 30-min window at 1 s would be 1,800
_WANTED = {name for names in SERIES.values() for name in names}
_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_engine_metrics(text: str) -> dict[str, float]:
    """Prometheus text → {series: value}, each summed over its label sets (vLLM labels one
    engine per data-parallel rank), a fraction averaged; NaN and ±Inf are dropped."""
    found: dict[str, float] = {}
    sets: dict[str, int] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match or match.group(1) not in _WANTED:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if not math.isfinite(value):
            continue
        found[match.group(1)] = found.get(match.group(1), 0.0) + value
        sets[match.group(1)] = sets.get(match.group(1), 0) + 1
    out: dict[str, float] = {}
    for series, names in SERIES.items():
        for name in names:
            if name in found:
                out[series] = found[name] / sets[name] if series in FRACTIONS else found[name]
                break
    return out


class EngineMetricsSampler:
    """Scrapes `scrape()` (the /metrics text) every `interval_s` between start() and stop()."""

    def __init__(self, scrape: Callable[[], str], *, interval_s: float = 1.0) -> None:
        self.scrape = scrape
        self.interval_s = interval_s
        self.samples: list[tuple[int, dict[str, float]]] = []
        self.failures = 0
        self.last_error = ""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def read_once(self) -> None:
        try:
            text = self.scrape()
        except Exception as exc:  # a server without /metrics, or busy: counted, not filled
            with self._lock:
                self.failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"[:200]
            return
        values = parse_engine_metrics(text)
        if values:
            with self._lock:
                self.samples.append((time.perf_counter_ns(), values))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.read_once()
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="engine-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def window(self, w0_ns: int, w1_ns: int) -> dict[str, Any] | None:
        """The series over [w0, w1] as (seconds from w0, value) pairs, with the last scrape
        before the window so a counter's difference over the window can be taken; None when
        no scrape answered."""
        with self._lock:
            samples = list(self.samples)
        before = [s for s in samples if s[0] < w0_ns][-1:]
        inside = [s for s in samples if w0_ns <= s[0] <= w1_ns]
        chosen = before + inside
        if not chosen:
            return None
        step = max(1, -(-len(chosen) // MAX_POINTS))
        if step > 1:  # thinned, always keeping the window's last scrape (a counter's end)
            chosen = chosen[:-1][::step][: MAX_POINTS - 1] + chosen[-1:]
        series: dict[str, list[list[float]]] = {}
        for t_ns, values in chosen:
            for name, value in values.items():
                series.setdefault(name, []).append([round((t_ns - w0_ns) / 1e9, 6), value])
        return {
            "source": "/metrics",
            "interval_s": self.interval_s,
            "counters": sorted(name for name in series if name in COUNTERS),
            "series": series,
            "failed_scrapes": self.failures,
        }
