"""Which catalog figures exist, how they are labelled, and how a page lists them."""

from __future__ import annotations

from typing import Any

# (field path, label, unit)
MODEL_FIELDS = [
    ("total_params_b", "Total parameters", "B"),
    ("active_params_prefill_b", "Active parameters at prefill", "B"),
    ("active_params_decode_b", "Active parameters at decode", "B"),
    ("context_length", "Context length", "tokens"),
    ("kv_bytes_per_token", "KV cache per token", "bytes"),
    ("weight_bits", "Native weight precision", "bits"),
    ("release_date", "Release date", ""),
    ("hf_repo", "Weights", ""),
]
PRECISIONS = ("fp4", "fp8", "bf16")
HARDWARE_FIELDS = [
    ("accelerators_per_system", "Accelerators per system", ""),
    ("memory_gb_per_accelerator", "Memory per accelerator", "GB"),
    ("hbm_bandwidth_tb_s", "Memory bandwidth per accelerator", "TB/s"),
    *[
        (f"peak_tflops_dense.{p}", f"Peak dense {p.upper()} per accelerator", "TFLOP/s")
        for p in PRECISIONS
    ],
    ("accelerator_power_w", "Accelerator power", "W"),
    ("system_power_kw", "System power", "kW"),
    ("interconnect", "Interconnect", ""),
    ("scale_up_domain", "Scale-up domain", "accelerators"),
]


def field_value(obj: Any, path: str) -> Any:
    head, _, rest = path.partition(".")
    value = getattr(obj, head, None)
    if rest:
        value = (value or {}).get(rest)
    return value if value not in ("", None) else None


def sourced_rows(obj: Any, fields: list[tuple[str, str, str]]) -> list[dict]:
    """One row per figure: its value or None (rendered "unknown"), unit, source and note."""
    sources = obj.sources or {}
    rows = []
    for path, label, unit in fields:
        source = sources.get(path) or {}
        rows.append(
            {
                "field": path,
                "label": label,
                "value": field_value(obj, path),
                "unit": unit,
                "source": source.get("source") or "",
                "note": source.get("note") or "",
            }
        )
    return rows
