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
from typing import Any

from agentperf.contract import TrialMetrics, TrialTelemetry

MEASURED_TOOLS = ("nvml", "nvidia-smi", "amd-smi")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def trial_energy(tel: TrialTelemetry, *, accelerators: int, throughput_tok_s: float | None) -> dict:
    """The energy block of one frontier point: {"measured": False, "reason"} or the
    measured power with its provenance and, when complete, tokens per joule. ``tel`` is
    the trial's telemetry read through the contract (docs/pipeline.md "The contract")."""
    power = _num(tel.power_w)
    if not tel.measured or tel.tool not in MEASURED_TOOLS or not power:
        return {"measured": False, "reason": tel.reason or "not measured"}
    measured = tel.accelerators or 0
    block = {
        "measured": True,
        "tool": tel.tool,
        "method": tel.method or "",
        "denominator": tel.denominator or "",
        "coverage": _num(tel.coverage),
        "max_gap_s": _num(tel.max_gap_s),
        "power_w": power,
        "energy_j": _num(tel.energy_j),
        "accelerators_measured": measured,
        "accelerators_used": accelerators,
        "complete": measured >= accelerators,
        "tokens_per_joule": None,
    }
    if block["complete"] and throughput_tok_s:
        block["tokens_per_joule"] = throughput_tok_s / power
    return block


def point_power_w(point: dict) -> float | None:
    """The power agents per MW may use: measured over all the accelerators used."""
    energy = point.get("energy") or {}
    return energy.get("power_w") if energy.get("measured") and energy.get("complete") else None


def result_energy(result: Any) -> dict:
    """Per tier, at its max agents: measured power, agents per MW, tokens per joule, and
    how they were measured. {"measured": False, "reason"} when no point was."""
    points = list(result.points or [])
    measured = [p for p in points if (p.get("energy") or {}).get("measured")]
    if not measured:
        reasons = sorted(
            {str((p.get("energy") or {}).get("reason") or "not measured") for p in points}
        )
        return {"measured": False, "reason": "; ".join(reasons) or "not measured"}
    tiers: dict[str, dict] = {}
    for name, n in (result.max_agents or {}).items():
        at = [p for p in measured if p.get("concurrency") == n]
        if not at:
            tiers[name] = {"max_agents": n, "measured": False}
            continue
        e = at[-1]["energy"]
        power = point_power_w(at[-1])
        tiers[name] = {
            "max_agents": n,
            "measured": True,
            "complete": e["complete"],
            "power_w": e["power_w"],
            "agents_per_mw": n / (power / 1e6) if power else None,
            "tokens_per_joule": e.get("tokens_per_joule"),
            "coverage": e.get("coverage"),
        }
    coverages = [c for p in measured if (c := p["energy"].get("coverage")) is not None]
    return {
        "measured": True,
        "tools": sorted({p["energy"]["tool"] for p in measured}),
        "methods": sorted({p["energy"]["method"] for p in measured}),
        "denominators": sorted({p["energy"]["denominator"] for p in measured}),
        "accelerators_used": result.accelerators_used,
        "accelerators_measured": max(p["energy"]["accelerators_measured"] for p in measured),
        "complete": all(p["energy"]["complete"] for p in measured),
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
) -> dict | None:
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
    return {
        "modelled": True,
        "label": MODELLED,
        "power_w": power,
        "power_w_per_accelerator": _num(block.power_w_per_accelerator),
        "accelerators": block.accelerators,
        "method": block.method,
        "tokens_per_joule": throughput_tok_s / power if throughput_tok_s else None,
    }


def result_modelled_power(*, simulated: bool, max_agents: dict, points: list[dict]) -> dict | None:
    """Per tier, at its max agents: modelled power, agents per MW and tokens per joule, from
    the points' modelled blocks (`Result.modelled_power`). None for a measured result or
    when the simulated profile models no power."""
    if not simulated:
        return None
    modelled = [p for p in points if isinstance(p.get("modelled_energy"), dict)]
    if not modelled:
        return None
    tiers: dict[str, dict] = {}
    for name, n in (max_agents or {}).items():
        at = [p["modelled_energy"] for p in modelled if p.get("concurrency") == n]
        if not at:
            continue
        power = sum(b["power_w"] for b in at) / len(at)
        tpj = [b["tokens_per_joule"] for b in at if b.get("tokens_per_joule")]
        tiers[name] = {
            "max_agents": n,
            "power_w": power,
            "agents_per_mw": n / (power / 1e6),
            "tokens_per_joule": sum(tpj) / len(tpj) if tpj else None,
        }
    return {
        "label": MODELLED,
        "method": modelled[0]["modelled_energy"].get("method", ""),
        "trials_modelled": len(modelled),
        "trials": len(points),
        "tiers": tiers,
    }


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
