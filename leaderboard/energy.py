"""Measured energy on published results: agents per MW and tokens per joule.

Only a trial's own telemetry measured on the runner host counts (`Trial.telemetry` with
`measured: true` from NVML, `nvidia-smi` or `amd-smi`, runner/telemetry/); a simulated
trial's modelled power is never read here, so a measured result shows measured figures
or "not measured", never a model's. Every figure carries its provenance: the tool, the
method (energy-counter delta or integrated power), the coverage of the window, and the
denominator — the accelerators measured against the accelerators the deployment used.
When fewer accelerators were measured than used, the power is partial and agents per MW
and tokens per joule are not computed (they would flatter the deployment).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from agentperf.contract import TrialMetrics, TrialTelemetry
from leaderboard.points import MeasuredEnergy, ModelledEnergy, PublishedPoint, UnmeasuredEnergy
from leaderboard.result_documents import ModelledPower, TierModelledPower

MEASURED_TOOLS = ("nvml", "nvidia-smi", "amd-smi")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def trial_energy(
    tel: TrialTelemetry, *, accelerators: int, throughput_tok_s: float | None
) -> MeasuredEnergy | UnmeasuredEnergy:
    """The energy block of one frontier point: why nothing was measured, or the measured
    power with its provenance and, when complete, tokens per joule. ``tel`` is the trial's
    telemetry read through the contract (docs/pipeline.md "The contract")."""
    power = _num(tel.power_w)
    if not tel.measured or tel.tool not in MEASURED_TOOLS or not power:
        return UnmeasuredEnergy(measured=False, reason=tel.reason or "not measured")
    measured = tel.accelerators or 0
    complete = measured >= accelerators
    return MeasuredEnergy(
        measured=True,
        tool=tel.tool,
        method=tel.method or "",
        denominator=tel.denominator or "",
        coverage=_num(tel.coverage),
        max_gap_s=_num(tel.max_gap_s),
        power_w=power,
        energy_j=_num(tel.energy_j),
        accelerators_measured=measured,
        accelerators_used=accelerators,
        complete=complete,
        tokens_per_joule=throughput_tok_s / power if complete and throughput_tok_s else None,
    )


def _tier_energy(n: int, at: list[PublishedPoint]) -> dict[str, Any]:
    """One tier's measured energy at its max agents ``n`` (the last point there)."""
    energy = at[-1].energy if at else None
    if not isinstance(energy, MeasuredEnergy):
        return {"max_agents": n, "measured": False}
    power = energy.full_power_w
    return {
        "max_agents": n,
        "measured": True,
        "complete": energy.complete,
        "power_w": energy.power_w,
        "agents_per_mw": n / (power / 1e6) if power else None,
        "tokens_per_joule": energy.tokens_per_joule,
        "coverage": energy.coverage,
    }


def result_energy(result: Any) -> dict[str, Any]:
    """Per tier, at its max agents: measured power, agents per MW, tokens per joule, and
    how they were measured. {"measured": False, "reason"} when no point was."""
    points: list[PublishedPoint] = result.published_points
    measured = [p for p in points if isinstance(p.energy, MeasuredEnergy)]
    if not measured:
        reasons = sorted(
            {
                p.energy.reason or "not measured"
                for p in points
                if isinstance(p.energy, UnmeasuredEnergy)
            }
        )
        return {"measured": False, "reason": "; ".join(reasons) or "not measured"}
    blocks = [b for p in measured if isinstance(b := p.energy, MeasuredEnergy)]
    tiers = {
        name: _tier_energy(n, [p for p in measured if p.concurrency == n])
        for name, n in (result.max_agents or {}).items()
    }
    coverages = [b.coverage for b in blocks if b.coverage is not None]
    return {
        "measured": True,
        "tools": sorted({b.tool for b in blocks}),
        "methods": sorted({b.method for b in blocks}),
        "denominators": sorted({b.denominator for b in blocks}),
        "accelerators_used": result.accelerators_used,
        "accelerators_measured": max(b.accelerators_measured for b in blocks),
        "complete": all(b.complete for b in blocks),
        "coverage_min": min(coverages) if coverages else None,
        "trials_measured": len(measured),
        "trials": len(points),
        "tiers": tiers,
    }


# --- modelled power (simulated results only) ---------------------------------------------

MODELLED = "modelled"
MEASURED = "measured"


def trial_modelled_energy(
    metrics: TrialMetrics, *, simulated: bool, throughput_tok_s: float | None
) -> ModelledEnergy | None:
    """The modelled-power block of a simulated trial's point: the simulator's own power model
    over the window (runner/telemetry/modelled.py, `metrics.modelled_energy`) and tokens
    per joule from it, labelled "modelled". None for a measured result, whatever its
    metrics say: a modelled figure is never read for one."""
    block = metrics.modelled_energy
    if not simulated or block is None:
        return None
    power = _num(block.power_w)
    if not power or power <= 0:
        return None
    return ModelledEnergy(
        modelled=True,
        label=MODELLED,
        power_w=power,
        power_w_per_accelerator=_num(block.power_w_per_accelerator),
        accelerators=block.accelerators,
        method=block.method,
        tokens_per_joule=throughput_tok_s / power if throughput_tok_s else None,
    )


def result_modelled_power(
    *, simulated: bool, max_agents: dict[str, int], points: Sequence[PublishedPoint]
) -> ModelledPower | None:
    """Per tier, at its max agents: modelled power, agents per MW and tokens per joule, from
    the points' modelled blocks (`Result.modelled_power`). None for a measured result or
    when the simulated profile models no power."""
    if not simulated:
        return None
    modelled = [(p, p.modelled_energy) for p in points if p.modelled_energy is not None]
    if not modelled:
        return None
    tiers: dict[str, TierModelledPower] = {}
    for name, n in (max_agents or {}).items():
        at = [block for p, block in modelled if p.concurrency == n]
        if not at:
            continue
        power = sum(b.power_w for b in at) / len(at)
        tpj = [b.tokens_per_joule for b in at if b.tokens_per_joule]
        tiers[name] = TierModelledPower(
            max_agents=n,
            power_w=power,
            agents_per_mw=n / (power / 1e6),
            tokens_per_joule=sum(tpj) / len(tpj) if tpj else None,
        )
    return ModelledPower(
        label=MODELLED,
        method=modelled[0][1].method,
        trials_modelled=len(modelled),
        trials=len(points),
        tiers=tiers,
    )


def power_source(result: Any) -> str | None:
    """ "measured" (runner-host telemetry), "modelled" (a simulated result's power model) or
    None (neither): the label every power figure of ``result`` carries."""
    if getattr(result, "is_simulated", False):
        return MODELLED if getattr(result, "modelled_power", None) else None
    return MEASURED if getattr(result, "agents_per_mw", None) is not None else None


def labelled(value: float | None, source: str | None, digits: int = 0) -> str | None:
    """A power figure as table text with its label, e.g. "12,345 (modelled)"."""
    if value is None or source is None:
        return None
    return f"{value:,.{digits}f} ({source})"
