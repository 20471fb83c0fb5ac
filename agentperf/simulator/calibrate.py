"""Closed-form views of a profile, and the engine-measured calibration sweep.

The closed-form views use the same CostModel as the simulation (no separate formulas),
evaluated at a steady state, so ``python -m agentperf.simulator show --profile P`` tells a
vendor what a profile implies before any run. ``run_sweep`` / ``report`` back
``python -m agentperf.simulator calibrate``: engine trials on virtual time, not the model's
own numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from agentperf.simulator import provenance
from agentperf.simulator.accuracy import PUBLISHED, HeldOutFigure
from agentperf.simulator.cost import CostModel
from agentperf.simulator.profile_types import Profile

if TYPE_CHECKING:
    from agentperf.engine.trajectory import Trajectory


def decode_step_seconds(profile: Profile, *, batch: int, context: int) -> float:
    """One decode iteration of ``batch`` sequences of ``context`` tokens on a decode replica."""
    role = profile.roles[-1]
    cm = CostModel(profile, role)
    k1 = profile.spec_k + 1
    return cm.cost(
        prefill_tokens=0,
        prefill_attended=0.0,
        prefill_ctx_read=0,
        decode_seqs=batch,
        verify=k1,
        decode_ctx=batch * context,
        decode_attended=batch * cm.attended(context),
        drafting=profile.spec_k > 0,
    ).seconds


def single_agent_speed(profile: Profile, *, context: int) -> float:
    """Expected output tok/s of one agent alone at ``context`` tokens of context."""
    return profile.spec_tokens_per_step / decode_step_seconds(profile, batch=1, context=context)


def decode_batch_for_speed(profile: Profile, speed: float, *, context: int) -> int | None:
    """Smallest number of sequences decoding together at which each gets at most ``speed``
    tok/s (None if a decode replica's ``max_batch`` is still faster)."""
    role = profile.roles[-1]

    def per_sequence(batch: int) -> float:
        step = decode_step_seconds(profile, batch=batch, context=context)
        return profile.spec_tokens_per_step / step

    if per_sequence(role.max_batch) > speed:
        return None
    lo, hi = 1, role.max_batch
    while lo < hi:
        mid = (lo + hi) // 2
        if per_sequence(mid) > speed:
            lo = mid + 1
        else:
            hi = mid
    return lo


def describe(profile: Profile) -> dict[str, Any]:
    return {
        "name": profile.name,
        "label": profile.label,
        "system": profile.system_slug,
        "model": profile.model_slug,
        "mode": profile.mode,
        "accelerators_used": profile.accelerators_used,
        "accelerators_total": profile.accelerators_total,
        "roles": [
            {
                "role": r.role,
                "replicas": r.replicas,
                "accelerators": r.accelerators,
                "max_batch": r.max_batch,
                "chunk_tokens": r.chunk_tokens,
                "kv_capacity_tokens": profile.kv_capacity_tokens(r),
            }
            for r in profile.roles
        ],
        "weight_gb": profile.weight_bytes / 1e9,
        "spec_tokens_per_step": profile.spec_tokens_per_step,
        "single_agent_tok_s_at_27k": single_agent_speed(profile, context=27_000),
        # how large a decode batch must be before agents slow to the public 82 tok/s point
        "decode_batch_for_82_tok_s_at_27k": decode_batch_for_speed(profile, 82.0, context=27_000),
        "provenance": profile.provenance,
        # each number by what it rests on; the assumptions no band covers, by name
        # (agentperf.simulator.provenance; docs/simulator.md "Profiles and the source of
        # every number")
        "provenance_counts": provenance.counts(profile),
        "unbanded_assumptions": provenance.unbanded_assumptions(profile),
    }


# --------------------------------------------------------------------------- engine sweep
# ``python -m agentperf.simulator calibrate``: the engine's own trial code on virtual time along
# a concurrency sweep (docs/simulator.md "Calibration"). Every number it prints comes from
# engine-measured trials; the frontier at a speed is interpolated between the two trials
# whose p25 speeds bracket it, never read off the cost model.

DEFAULT_SWEEP = (1, 2, 4, 16, 64, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288)
DEFAULT_AT = (220.0, 82.0)


@dataclass(slots=True, frozen=True)
class SweepPoint:
    """One engine trial of the sweep (per-accelerator figures over the accelerators used)."""

    concurrency: int
    requests: int
    p25_speed: float
    ttft_p75_s: float
    throughput_per_accelerator: float
    output_tok_s: float
    total_tok_s: float
    # modelled (profiles with a power section), mean over the window; None otherwise
    modelled_power_w_per_accelerator: float | None = None

    @property
    def modelled_tokens_per_joule(self) -> float | None:
        w = self.modelled_power_w_per_accelerator
        return self.throughput_per_accelerator / w if w else None

    def modelled_agents_per_mw(self, accelerators: int) -> float | None:
        w = self.modelled_power_w_per_accelerator
        return self.concurrency / (w * accelerators / 1e6) if w else None


def sweep_trial(
    profile: Profile,
    trajectories: Sequence[Trajectory],
    *,
    concurrency: int,
    warmup_s: float = 60.0,
    duration_s: float = 120.0,
    ramp_s: float = 30.0,
    seed: int = 0,
) -> SweepPoint:
    """One engine trial of ``profile`` on virtual time with the search's virtual defaults
    (primed cache, agents started over ``ramp_s``); modelled energy over the window."""
    from agentperf.engine.loop import quiet_gc
    from agentperf.engine.replay import ReplayConfig
    from agentperf.engine.trial import TrialConfig, run_trial
    from agentperf.simulator.virtual import SimTransport, run_with_simulator

    config = TrialConfig(
        concurrency=concurrency,
        warmup_s=warmup_s,
        duration_s=duration_s,
        accelerators=profile.accelerators_used,
        replay=ReplayConfig(
            model=profile.served_model_names[0], seed=seed, ramp_s=ramp_s, prime_cache=True
        ),
        bootstrap_resamples=0,
    )
    holder: list[SimTransport] = []
    energy: dict[str, float] = {}

    def on_window(mark: str, t_ns: int) -> None:
        energy[mark] = holder[0].deployment.totals().energy_j

    async def main(transport: Any, clock: Any) -> Any:
        return await run_trial(transport, clock, trajectories, config, on_window=on_window)

    quiet_gc()
    result = run_with_simulator(profile, main, seed=seed, transport_out=holder)
    s = result.summary
    power = None
    if "end" in energy:
        total = profile.modelled_power_w(energy["end"] - energy["start"], s.window_s)
        power = None if total is None else total / profile.accelerators_used
    return SweepPoint(
        concurrency=concurrency,
        requests=s.requests,
        p25_speed=s.p25_output_speed,
        ttft_p75_s=s.ttft_s.get("p75", math.nan),
        throughput_per_accelerator=s.throughput_per_accelerator,
        output_tok_s=s.output_throughput_tok_s,
        total_tok_s=s.throughput_tok_s,
        modelled_power_w_per_accelerator=power,
    )


def frontier_at(points: Sequence[SweepPoint], speed: float) -> float | None:
    """Throughput per accelerator at p25 speed ``speed``: linear between the first two
    consecutive trials of the sweep (by concurrency) whose p25 speeds bracket it."""
    pts = sorted(points, key=lambda p: p.concurrency)
    for a, b in zip(pts, pts[1:], strict=False):
        hi, lo = (a, b) if a.p25_speed >= b.p25_speed else (b, a)
        if lo.p25_speed <= speed <= hi.p25_speed:
            if hi.p25_speed == lo.p25_speed:
                return max(a.throughput_per_accelerator, b.throughput_per_accelerator)
            f = (hi.p25_speed - speed) / (hi.p25_speed - lo.p25_speed)
            return hi.throughput_per_accelerator + f * (
                lo.throughput_per_accelerator - hi.throughput_per_accelerator
            )
    return None


def run_sweep(
    profile: Profile,
    trajectories: Sequence[Trajectory],
    *,
    concurrencies: Sequence[int] = DEFAULT_SWEEP,
    stop_below: float | None = None,
    on_point: Callable[[SweepPoint], None] | None = None,
    **trial: Any,
) -> list[SweepPoint]:
    """Trials at each concurrency in order; stops after the first trial whose p25 speed is
    below ``stop_below`` (the slowest speed asked for), so the frontier is bracketed."""
    out: list[SweepPoint] = []
    for n in concurrencies:
        pt = sweep_trial(profile, trajectories, concurrency=n, **trial)
        out.append(pt)
        if on_point is not None:
            on_point(pt)
        if stop_below is not None and pt.p25_speed < stop_below:
            break
    return out


def load_points(path: str | Path) -> dict[str, Any]:
    """Published points to compare with: YAML/JSON ``{single_agent, two_agents,
    frontier: {speed: throughput per accelerator}, source}``."""
    doc = yaml.safe_load(Path(path).read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping")
    allowed = {"single_agent", "two_agents", "frontier", "source", "note"}
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise ValueError(f"{path}: unknown field(s) {', '.join(unknown)}")
    frontier = {float(k): float(v) for k, v in (doc.get("frontier") or {}).items()}
    return {**doc, "frontier": frontier}


def _err(measured: float | None, published: float | None) -> str:
    if measured is None or not published:
        return "n/a"
    return f"{100.0 * (measured - published) / published:+.1f} %"


def report(
    profile: Profile,
    points: Sequence[SweepPoint],
    *,
    at: Sequence[float],
    published: dict[str, Any] | None = None,
) -> str:
    """The sweep table, the frontier at ``at``, 1- and 2-agent speeds, % errors."""
    pub = published or {}
    lines = [f"profile {profile.name}: {profile.accelerators_used} accelerators used (simulated)"]
    modelled = profile.power_tdp_w is not None
    head = f"{'N':>7} {'requests':>9} {'p25 tok/s':>10} {'TTFT p75 s':>11} {'tok/s/acc':>11}"
    if modelled:
        head += f" {'W/acc (modelled)':>17} {'tok/J (modelled)':>17} {'agents/MW (modelled)':>21}"
    lines.append(head)
    for p in points:
        row = (
            f"{p.concurrency:>7} {p.requests:>9} {p.p25_speed:>10.1f} {p.ttft_p75_s:>11.3f} "
            f"{p.throughput_per_accelerator:>11.0f}"
        )
        if modelled and p.modelled_power_w_per_accelerator is not None:
            apm = p.modelled_agents_per_mw(profile.accelerators_used) or 0.0
            row += (
                f" {p.modelled_power_w_per_accelerator:>17.0f} "
                f"{p.modelled_tokens_per_joule or 0.0:>17.1f} {apm:>21.0f}"
            )
        lines.append(row)
    by_n = {p.concurrency: p for p in points}
    for n, key, label in ((1, "single_agent", "single agent"), (2, "two_agents", "two agents")):
        pt = by_n.get(n)
        got = pt.p25_speed if pt else None
        ref = pub.get(key)
        text = f"{got:.0f} tok/s" if got is not None else "not run"
        if ref:
            text += f" (published {float(ref):.0f}: {_err(got, float(ref))})"
        lines.append(f"{label}: {text}")
    for x in at:
        y = frontier_at(points, x)
        ref = pub.get("frontier", {}).get(float(x))
        text = f"{y:,.0f} tok/s per accelerator" if y is not None else "not bracketed by the sweep"
        if ref:
            text += f" (published {ref:,.0f}: {_err(y, ref)})"
        lines.append(f"at {x:g} tok/s per agent: {text}")
    return "\n".join(lines)


def held_out_figures(
    points: Sequence[SweepPoint], published: dict[str, Any]
) -> list[HeldOutFigure]:
    """The sweep read at every figure of a published points file the profile was never
    fitted to: 1 and 2 agents at their trials, each frontier speed between the two trials
    that bracket it, or never reached (docs/simulator.md "Accuracy")."""
    by_n = {p.concurrency: p for p in points}
    out: list[HeldOutFigure] = []
    for n, key, label in ((1, "single_agent", "1 agent"), (2, "two_agents", "2 agents")):
        if published.get(key):
            pt = by_n.get(n)
            out.append(
                HeldOutFigure(
                    figure=label,
                    unit="tok/s per agent",
                    reference=float(published[key]),
                    simulated=None if pt is None else round(pt.p25_speed, 2),
                    basis=PUBLISHED,
                    read="at a trial" if pt else "not run",
                )
            )
    for speed, ref in sorted(published.get("frontier", {}).items(), reverse=True):
        y = frontier_at(points, speed)
        out.append(
            HeldOutFigure(
                figure=f"at {speed:g} tok/s per agent",
                unit="tok/s per accelerator",
                reference=float(ref),
                simulated=None if y is None else round(y, 1),
                basis=PUBLISHED,
                read="between trials" if y is not None else "never reached by the sweep",
            )
        )
    return out
