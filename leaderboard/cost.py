"""What a result costs to run: $ per million output tokens, $ per million total tokens and $
per agent-hour at each tier's max agents, for each price class of the catalog
(docs/catalog.md "Prices", the methodology page "Cost").

Computed when read, from the result's stored points and the hardware system's catalog
prices (`catalog.HardwarePrice`): a price changed in the catalog changes every figure at
once, with nothing re-run. A price the catalog does not have, or a figure a price needs and
the result does not have (an owned system's power), is None and shows as "—", never 0.

- Rental classes (on-demand cloud, neocloud): $/h = $ per accelerator-hour × accelerators
  used.
- Owned: $/h = capex per system ÷ accelerators per system × accelerators used ÷
  (amortization years × 8,760 h) + power (kW) × PUE × $ per kWh. The power is the result's
  own at that concurrency: measured on the runner host over the window (every accelerator
  used measured), or, for a simulated result, the simulator's modelled power, labelled
  "modelled" (leaderboard.energy). Neither: no owned figure.
- $ per million output tokens = $/h ÷ (output tokens/s × 3,600) × 10⁶; total tokens the
  same with input + output tokens/s; $ per agent-hour = $/h ÷ max agents.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from typing import Any

from agentperf.engine import frontier
from catalog.models import HardwarePrice
from leaderboard.energy import MEASURED, MODELLED
from leaderboard.points import PublishedPoint, point_at

HOURS_PER_YEAR = 8760.0
CLASSES = (HardwarePrice.CLASS_ON_DEMAND, HardwarePrice.CLASS_NEOCLOUD, HardwarePrice.CLASS_OWNED)
CLASS_LABELS = dict(HardwarePrice.CLASS_CHOICES)
FIGURES = ("usd_per_m_output_tokens", "usd_per_m_total_tokens", "usd_per_agent_hour")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def price_doc(price: HardwarePrice) -> dict:
    """A catalog price as the API and the pages show it: its figures, date and sources."""
    return {
        "class": price.price_class,
        "label": CLASS_LABELS.get(price.price_class, price.price_class),
        "date": price.date.isoformat(),
        "source": price.source,
        "usd_per_accelerator_hour": price.usd_per_accelerator_hour,
        "capex_usd_per_system": price.capex_usd_per_system,
        "amortization_years": price.amortization_years,
        "usd_per_kwh": price.usd_per_kwh,
        "pue": price.pue,
        "sources": price.sources,
    }


def hourly_cost(
    price: HardwarePrice | None,
    *,
    accelerators: int,
    accelerators_per_system: int | None,
    power_w: float | None,
) -> float | None:
    """$ per hour of the deployment under ``price``; None when a figure it needs is unknown."""
    if price is None:
        return None
    if price.price_class != HardwarePrice.CLASS_OWNED:
        rate = _num(price.usd_per_accelerator_hour)
        return rate * accelerators if rate is not None else None
    capex, years = _num(price.capex_usd_per_system), _num(price.amortization_years)
    kwh, pue = _num(price.usd_per_kwh), _num(price.pue)
    per_system = _num(accelerators_per_system)
    power = _num(power_w)
    if None in (capex, years, kwh, pue, per_system, power):
        return None
    assert capex and years and kwh and pue and per_system and power  # for the type checker
    capital = capex / per_system * accelerators / (years * HOURS_PER_YEAR)
    return capital + power / 1000.0 * pue * kwh


def _point_power(result: Any, point: PublishedPoint) -> tuple[float | None, str | None]:
    """(watts, "measured" | "modelled") of one point; (None, None) when neither."""
    if result.is_simulated:
        block = point.modelled_energy
        power = _num(block.power_w) if block is not None else None
        return (power, MODELLED) if power is not None else (None, None)
    power = _num(point.energy.full_power_w)  # measured over all the accelerators used
    return (power, MEASURED) if power is not None else (None, None)


def _per_million(hourly: float | None, tok_s: float | None) -> float | None:
    if hourly is None or tok_s is None:
        return None
    return hourly / (tok_s * 3600.0) * 1e6


def result_cost(result: Any, prices: Iterable[HardwarePrice] | None = None) -> dict:
    """Per tier at its max agents, per price class: the three cost figures, the $/h they
    come from and the power's label; plus each class's catalog price (None: the catalog
    has none). ``prices`` default: the result's hardware system's, read now."""
    if prices is None:  # prefetch "hardware__prices" to read many results in one query
        prices = result.hardware.prices.all()
    by_class = {p.price_class: p for p in prices}
    accelerators = int(result.accelerators_used)
    per_system = getattr(result.hardware, "accelerators_per_system", None)
    points = result.published_points
    tiers: dict[str, dict] = {}
    for name, n in (result.max_agents or {}).items():
        point = point_at(points, n)
        if point is None:
            continue
        throughput = _num(point.throughput_per_accelerator)
        output = _num(point.output_throughput_per_accelerator)
        total_tok_s = throughput * accelerators if throughput is not None else None
        output_tok_s = output * accelerators if output is not None else None
        power_w, power_label = _point_power(result, point)
        classes: dict[str, dict] = {}
        for kind in CLASSES:
            price = by_class.get(kind)
            owned = kind == HardwarePrice.CLASS_OWNED
            hourly = hourly_cost(
                price,
                accelerators=accelerators,
                accelerators_per_system=per_system,
                power_w=power_w,
            )
            classes[kind] = {
                "usd_per_hour": hourly,
                "usd_per_m_output_tokens": _per_million(hourly, output_tok_s),
                "usd_per_m_total_tokens": _per_million(hourly, total_tok_s),
                "usd_per_agent_hour": hourly / n if hourly is not None else None,
                "power_w": power_w if owned else None,
                "power_source": power_label if owned and hourly is not None else None,
            }
        tiers[name] = {
            "max_agents": n,
            "throughput_tok_s": total_tok_s,
            "output_throughput_tok_s": output_tok_s,
            "classes": classes,
        }
    return {
        "prices": {kind: (price_doc(p) if (p := by_class.get(kind)) else None) for kind in CLASSES},
        "power_source": MODELLED if result.is_simulated else MEASURED,
        "tiers": tiers,
    }


def _power_at_speed(result: Any, speed: float) -> float | None:
    """The deployment's power (W) at per-agent speed ``speed``: interpolated linearly in
    speed between the result's Pareto-frontier points (the points iso-speed reads), each
    with its measured or, simulated, modelled power; None outside the measured range or
    when a frontier point near it has no power."""
    by_key: dict[frontier.Point, PublishedPoint] = {}
    for p in result.published_points:
        by_key[frontier.Point(p.concurrency, p.p25_speed, p.throughput_per_accelerator)] = p
    line = frontier.pareto_frontier(by_key)
    xs = [pt.speed for pt in line]
    if not xs or not xs[0] <= speed <= xs[-1]:
        return None
    i = bisect.bisect_left(xs, speed)
    j = max(0, i - 1) if xs[i] != speed else i
    lo, hi = line[j], line[i]
    p_lo, _ = _point_power(result, by_key[lo])
    p_hi, _ = _point_power(result, by_key[hi])
    if p_lo is None or p_hi is None:
        return None
    if hi.speed == lo.speed:
        return p_lo
    return p_lo + (p_hi - p_lo) * (speed - lo.speed) / (hi.speed - lo.speed)


def cost_at_speed(result: Any, speed: float, price: HardwarePrice | None) -> float | None:
    """$ per million total tokens at per-agent speed ``speed``: the deployment's $ per hour
    there over its throughput read off the result's frontier there (docs/engine.md
    "Frontier and comparisons"). Owned uses the power interpolated the same way. None
    outside the measured range, with no price, or (owned) with no power there."""
    if price is None:
        return None
    throughput = frontier.throughput_at_speed(result.frontier_points(), speed)
    if not throughput:
        return None
    accelerators = int(result.accelerators_used)
    power = None
    if price.price_class == HardwarePrice.CLASS_OWNED:
        power = _power_at_speed(result, speed)
    hourly = hourly_cost(
        price,
        accelerators=accelerators,
        accelerators_per_system=getattr(result.hardware, "accelerators_per_system", None),
        power_w=power,
    )
    return _per_million(hourly, throughput * accelerators)


def money(value: float | None) -> str:
    """A $ figure as page text; "—" for an unknown one (never 0)."""
    if value is None:
        return "—"
    if value >= 100:
        return f"${value:,.0f}"
    if value >= 1:
        return f"${value:,.2f}"
    return f"${value:.4f}"


# the dumps' columns (leaderboard.export): one per figure and price class
COST_COLUMNS = tuple(f"{figure}_{kind.replace('-', '_')}" for kind in CLASSES for figure in FIGURES)
