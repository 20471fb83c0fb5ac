"""Modelled power of a simulated trial, from the simulator's own counters (pure).

The simulated serving system models accelerator power as idle plus a dynamic share of a
sourced TDP (docs/simulator.md "Modelled power") and exports it beside its vLLM counters:
``sim:modelled_dynamic_energy_joules_total`` (energy above idle so far) and
``sim:modelled_idle_power_watts`` (per accelerator), with ``sim:accelerators_used``. The
worker scrapes them at a trial window's start and end (``parse_metrics`` names, ``_total``
dropped); this turns the two scrapes into the window's mean modelled power.

The figure is a model's, never a measurement: it travels in its own key
(``Trial.metrics["modelled_energy"]``), separate from measured telemetry, is taken only from
runs whose launcher is the simulator, and is published only on simulated results
(leaderboard.energy), labelled "modelled".
"""

from __future__ import annotations

import math
from typing import Any

ENERGY = "sim:modelled_dynamic_energy_joules"
IDLE = "sim:modelled_idle_power_watts"
ACCELERATORS = "sim:accelerators_used"
METHOD = (
    "modelled by the simulator: per accelerator, idle power (a share of the profile's sourced "
    "TDP) plus the TDP's dynamic rest times each iteration's utilisation, over the window"
)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def modelled_power(scrapes: Any, window_s: Any) -> dict[str, Any] | None:
    """The window's modelled power from /metrics scrapes ``{"start": {...}, "end": {...}}``;
    None when the server does not model power or a scrape is missing."""
    if not isinstance(scrapes, dict):
        return None
    start, end = scrapes.get("start"), scrapes.get("end")
    seconds = _num(window_s)
    if not isinstance(start, dict) or not isinstance(end, dict) or not seconds or seconds <= 0:
        return None
    e0, e1 = _num(start.get(ENERGY)), _num(end.get(ENERGY))
    idle, accelerators = _num(end.get(IDLE)), _num(end.get(ACCELERATORS))
    if e0 is None or e1 is None or idle is None or accelerators is None:
        return None
    if accelerators < 1 or idle < 0 or e1 < e0:
        return None
    dynamic = e1 - e0
    power = accelerators * idle + dynamic / seconds
    if power <= 0:
        return None
    return {
        "modelled": True,
        "power_w": power,
        "power_w_per_accelerator": power / accelerators,
        "idle_power_w_per_accelerator": idle,
        "dynamic_energy_j": dynamic,
        "accelerators": int(accelerators),
        "window_s": seconds,
        "method": METHOD,
    }
