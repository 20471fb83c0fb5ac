"""The twin's real-time server's ``GET /metrics``: Prometheus text under vLLM's metric names
(the counters a trial's window scrape reads, docs/metrics.md), the twin's own ``sim:`` rows
(iterations, accelerators, how far its writes lag the model) and, for a profile with a power
section, its modelled energy (docs/simulator.md "Modelled power on results").
"""

from __future__ import annotations

from dataclasses import dataclass

from agentperf.simulator.profile_types import Profile
from agentperf.simulator.scheduler import Counters

# (name, Prometheus type, help text, value)
Row = tuple[str, str, str, float]


@dataclass(slots=True)
class EmissionLag:
    """How far the server's writes carrying output came after the model's emission times."""

    max_ns: int = 0
    sum_ns: int = 0
    count: int = 0

    def add(self, lag_ns: int) -> None:
        self.sum_ns += lag_ns
        self.count += 1
        if lag_ns > self.max_ns:
            self.max_ns = lag_ns


def _vllm_rows(c: Counters, gauges: dict[str, float], inflated_hits: int) -> list[Row]:
    """The deployment's gauges and counters under vLLM's names; the prefix-cache hits with
    whatever the behaviour reported beyond the cache (``inflated_hits``)."""
    return [
        ("vllm:num_requests_running", "gauge", "Requests in the batch.", gauges["running"]),
        ("vllm:num_requests_waiting", "gauge", "Requests queued.", gauges["waiting"]),
        ("vllm:kv_cache_usage_perc", "gauge", "KV cache in use (1 = full).", gauges["kv_usage"]),
        (
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prompt tokens looked up.",
            c.prefix_queries,
        ),
        (
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prompt tokens found cached.",
            c.prefix_hits + inflated_hits,
        ),
        ("vllm:prompt_tokens_total", "counter", "Prompt tokens admitted.", c.prompt_tokens),
        ("vllm:generation_tokens_total", "counter", "Tokens generated.", c.generation_tokens),
        ("vllm:request_success_total", "counter", "Requests finished.", c.requests_finished),
        ("vllm:spec_decode_num_drafts_total", "counter", "Draft proposals.", c.spec_drafts),
        (
            "vllm:spec_decode_num_draft_tokens_total",
            "counter",
            "Draft tokens.",
            c.spec_draft_tokens,
        ),
        (
            "vllm:spec_decode_num_accepted_tokens_total",
            "counter",
            "Accepted draft tokens.",
            c.spec_accepted,
        ),
    ]


def _twin_rows(c: Counters, accelerators_seen: int, lag: EmissionLag) -> list[Row]:
    """The twin's own rows: iterations, accelerators shown, write lag behind the model."""
    return [
        ("sim:iterations_total", "counter", "Model iterations run.", c.iterations),
        ("sim:accelerators_used", "gauge", "Accelerators serving.", accelerators_seen),
        (
            "sim:emission_lag_seconds_max",
            "gauge",
            "Worst write lag behind the model.",
            lag.max_ns / 1e9,
        ),
        (
            "sim:emission_lag_seconds_sum",
            "counter",
            "Total write lag behind the model.",
            lag.sum_ns / 1e9,
        ),
        ("sim:emission_lag_seconds_count", "counter", "Writes carrying output.", lag.count),
    ]


def _power_rows(profile: Profile, c: Counters) -> list[Row]:
    """Modelled (never measured) energy and idle power, for a profile with a power section."""
    if profile.power_tdp_w is None:
        return []
    return [
        (
            "sim:modelled_dynamic_energy_joules_total",
            "counter",
            "Modelled accelerator energy above idle (docs/simulator.md).",
            c.energy_j,
        ),
        (
            "sim:modelled_idle_power_watts",
            "gauge",
            "Modelled idle power per accelerator (docs/simulator.md).",
            profile.power_idle_w,
        ),
    ]


def metrics_text(
    profile: Profile,
    totals: Counters,
    gauges: dict[str, float],
    *,
    inflated_hits: int,
    accelerators_seen: int,
    lag: EmissionLag,
) -> str:
    """The /metrics body: each row with its HELP and TYPE, labelled with the first served
    model name."""
    rows = [
        *_vllm_rows(totals, gauges, inflated_hits),
        *_twin_rows(totals, accelerators_seen, lag),
        *_power_rows(profile, totals),
    ]
    label = f'{{model_name="{profile.served_model_names[0]}"}}'
    lines = []
    for name, kind, help_text, value in rows:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.append(f"{name}{label} {float(value)!r}")
    return "\n".join(lines) + "\n"
