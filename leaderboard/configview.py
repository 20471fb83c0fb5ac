"""A deployment config made readable: grouped fields, a diff, and the prefill/decode roles.

The config schema lives in submissions/; this module reads the stored document generically
(nested mappings and lists) so a page never breaks on a field it does not know, and it
redacts anything that looks like a secret before it reaches a page or an export.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from leaderboard.configdiff import ABSENT, config_table
from submissions.schema.secrets import (
    credential_kind,
    is_secret_ref,
    looks_secret_name,
    secret_flag_values,
)

REDACTED = "[redacted]"
SECRET_REFERENCE = "secret (resolved on the runner host)"
_ACRONYMS = {
    "tp": "TP",
    "pp": "PP",
    "dp": "DP",
    "ep": "EP",
    "kv": "KV",
    "mtp": "MTP",
    "gpu": "GPU",
    "gpus": "GPUs",
    "url": "URL",
    "id": "ID",
    "fp8": "FP8",
    "fp4": "FP4",
    "bf16": "BF16",
    "moe": "MoE",
    "cuda": "CUDA",
    "gb": "GB",
    "w": "W",
}


def humanize(key: str) -> str:
    words = re.split(r"[_\-\s]+", str(key))
    out = [_ACRONYMS.get(w.lower(), w) for w in words if w]
    if out and out[0] == out[0].lower():
        out[0] = out[0][:1].upper() + out[0][1:]
    return " ".join(out)


def redact(value: Any, key: str = "") -> Any:
    """Secrets out: a {secret: true} reference is named as such, a clear value is hidden.

    The same detector that refuses clear secrets at submission (docs/security.md) decides
    here, so a config stored before a rule existed is still shown without the value."""
    if is_secret_ref(value) and len(value) <= 2:
        return SECRET_REFERENCE
    if key and looks_secret_name(key) and value not in (None, "", False, True):
        return REDACTED
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        flagged = set(secret_flag_values(value))
        return [REDACTED if i in flagged else redact(v) for i, v in enumerate(value)]
    if isinstance(value, str) and credential_kind(value):
        return REDACTED
    return value


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "—"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def flatten(config: Any, prefix: str = "") -> dict[str, str]:
    """{"a.b.0.c": "value"} for every leaf, secrets redacted, values as display text."""
    out: dict[str, str] = {}
    config = redact(config) if not prefix else config
    if isinstance(config, dict):
        if not config and prefix:
            out[prefix] = "—"
        for key, value in config.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(config, list) and any(isinstance(v, (dict, list)) for v in config):
        for i, value in enumerate(config):
            out.update(flatten(value, f"{prefix}.{i}"))
    elif isinstance(config, list):
        out[prefix] = ", ".join(_scalar(v) for v in config) if config else "—"
    else:
        out[prefix or "value"] = _scalar(config)
    return out


@dataclass(slots=True)
class ConfigGroup:
    key: str
    title: str
    rows: list[tuple[str, str, str]]  # (path, readable label, value)


def grouped(config: dict | None) -> list[ConfigGroup]:
    """One group per top-level section; top-level scalars go to "General"."""
    groups: dict[str, ConfigGroup] = {}
    for path, value in flatten(config or {}).items():
        head, _, rest = path.partition(".")
        key = head if rest else "_general"
        group = groups.setdefault(
            key, ConfigGroup(key, "General" if key == "_general" else humanize(head), [])
        )
        label = " › ".join(
            humanize(p) if not p.isdigit() else f"#{int(p) + 1}" for p in (rest or head).split(".")
        )
        group.rows.append((path, label, value))
    ordered = sorted(groups.values(), key=lambda g: (g.key != "_general", g.key))
    return ordered


@dataclass(slots=True)
class DiffRow:
    path: str
    values: list[str]
    changed: bool


def diff(configs: list[dict | None]) -> list[DiffRow]:
    """The compare page's side by side: every field of any config with each config's value
    as display text (leaderboard.configdiff.config_table, the review console's diff rules),
    secrets redacted; `changed` when the values differ."""
    rows = config_table([redact(c or {}) for c in configs])
    return [
        DiffRow(
            row.path,
            ["(absent)" if v is ABSENT else _scalar(v) for v in row.values],
            row.changed,
        )
        for row in rows
    ]


@dataclass(slots=True)
class Role:
    name: str
    instances: int | None
    accelerators: int | None  # total for the role
    per_instance: int | None
    details: list[tuple[str, str]]


_PARALLEL_KEYS = ("tp", "pp", "dp", "ep", "tensor_parallel", "pipeline_parallel")
_COUNT_KEYS = ("accelerators", "num_accelerators", "gpus", "num_gpus", "accelerator_count")
_PER_INSTANCE_KEYS = (
    "accelerators_per_worker",
    "accelerators_per_instance",
    "accelerators_per_replica",
    "gpus_per_instance",
    "gpus_per_worker",
)
_INSTANCE_KEYS = ("workers", "instances", "replicas", "count", "num_instances")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _first(entry: dict, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        if (value := _int(entry.get(key))) is not None:
            return value
    return None


def roles(config: dict | None) -> list[Role]:
    """Prefill/decode (or aggregated) roles from `config["topology"]["roles"]`.

    Accepts a list of role objects (with "role" or "name") or a mapping name → object;
    accelerator counts come from an explicit total, else instances × per-instance, else
    instances × the product of parallelism degrees. Unknown counts stay None.
    """
    topology = (config or {}).get("topology")
    raw = topology.get("roles") if isinstance(topology, dict) else None
    if isinstance(raw, dict):
        entries = [dict(v, name=k) if isinstance(v, dict) else {"name": k} for k, v in raw.items()]
    elif isinstance(raw, list):
        entries = [e for e in raw if isinstance(e, dict)]
    else:
        return []
    out = []
    for entry in redact(entries):
        name = str(entry.get("role") or entry.get("name") or entry.get("kind") or "role")
        instances = _first(entry, _INSTANCE_KEYS)
        per_instance = _first(entry, _PER_INSTANCE_KEYS)
        parallel = entry.get("parallelism") if isinstance(entry.get("parallelism"), dict) else {}
        if per_instance is None:
            degrees = [_int(parallel.get(k)) or _int(entry.get(k)) for k in ("tp", "pp", "dp")]
            degrees = [d for d in degrees if d]
            if degrees:
                per_instance = 1
                for d in degrees:
                    per_instance *= d
        total = _first(entry, _COUNT_KEYS)
        if total is None and per_instance is not None:
            total = per_instance * (instances or 1)
        skip = {"role", "name", "kind", *_COUNT_KEYS, *_PER_INSTANCE_KEYS, *_INSTANCE_KEYS}
        details = [
            (
                humanize(k),
                _scalar(v)
                if not isinstance(v, dict)
                else ", ".join(f"{humanize(a)} {_scalar(b)}" for a, b in v.items()),
            )
            for k, v in entry.items()
            if k not in skip
        ]
        out.append(Role(name, instances, total, per_instance, details))
    return out
