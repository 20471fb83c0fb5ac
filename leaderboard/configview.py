"""A deployment config made readable: grouped fields, a diff, and the prefill/decode roles.

The config schema lives in submissions/; this module reads the stored document generically
(nested mappings and lists) so a page never breaks on a field it does not know, and it
redacts anything that looks like a secret before it reaches a page or an export.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

from agentperf.schema.secrets import REFUSE, is_secret_ref, looks_secret_name, scan
from leaderboard.configdiff import ABSENT, config_table
from submissions.stored_config import StoredConfig

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
    """Secrets out: a {secret: …} reference is named as such, a clear value is hidden.

    The same detector that refuses clear secrets at submission (docs/security.md "Secrets
    in configs") decides here, over the whole document with its real field paths, so a
    config stored before a rule existed is still shown without the value."""
    refused = {f.path for f in scan(value if not key else {key: value}) if f.severity == REFUSE}
    if key:
        refused = {p.removeprefix(f"{key}.") if p != key else "" for p in refused}
    return _redacted(value, "", refused, key)


def _redacted(value: Any, path: str, refused: set[str], key: str) -> Any:
    if is_secret_ref(value) and len(value) <= 2:
        return SECRET_REFERENCE
    if isinstance(value, str) and value in (SECRET_REFERENCE, REDACTED):
        return value  # already redacted: redact is idempotent (a public config is redacted)
    if path in refused:
        return REDACTED
    if key and looks_secret_name(key) and value not in (None, "", False, True):
        return REDACTED
    if isinstance(value, dict):
        out = {}
        for i, (k, v) in enumerate(value.items()):
            child = f"{path}.{k}" if path else str(k)
            if _key_carries(k):  # a key that is itself a credential: key and value hidden
                out[f"{REDACTED} #{i + 1}"] = REDACTED
                continue
            out[k] = _redacted(v, child, refused, str(k))
        return out
    if isinstance(value, list):
        return [
            _redacted(v, f"{path}.{i}" if path else str(i), refused, "")
            for i, v in enumerate(value)
        ]
    return value


def _key_carries(key: Any) -> bool:
    """A mapping key that is itself a credential (its name is redacted too)."""
    return isinstance(key, str) and any(
        f.rule == "a field name carries a credential" for f in scan({key: None})
    )


def config_withheld(result: Any) -> str | None:
    """Why a result no longer serves its config publicly, or None while it does: an
    invalidated result, or one whose submission was withdrawn (docs/security.md "Secrets
    in configs")."""
    status = getattr(result, "status", "")
    submission = getattr(result, "submission", None)
    if status == "invalidated" or getattr(submission, "status", "") in (
        "invalidated",
        "withdrawn",
    ):
        return "The configuration of an invalidated or withdrawn result is no longer published."
    return None


def public_config(result: Any) -> dict | None:
    """The config every public surface serves for `result` (the result page, the public API,
    the export dump, the compare page): None once withheld; else the stored public config
    (redacted at publish, rewritten by a reviewer's redact), or for a result published
    before that field, the submission's config through `redact`."""
    if config_withheld(result):
        return None
    stored = getattr(result, "public_config", None)
    if stored is not None:
        return stored
    return redact(getattr(getattr(result, "submission", None), "config", None) or {})


def redact_paths(config: dict, paths: list[str]) -> tuple[dict, list[str]]:
    """`config` with the value at each dotted path replaced by REDACTED (a mapping or list
    there becomes one REDACTED value); returns (the new config, the paths not found)."""
    out = copy.deepcopy(config)
    missing = []
    for path in paths:
        parts = [p for p in path.split(".") if p]
        node: Any = out
        for part in parts[:-1]:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                node = None
                break
        last = parts[-1] if parts else ""
        if isinstance(node, dict) and last in node:
            node[last] = REDACTED
        elif isinstance(node, list) and last.isdigit() and int(last) < len(node):
            node[int(last)] = REDACTED
        else:
            missing.append(path)
    return out, missing


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


def roles(config: StoredConfig) -> list[Role]:
    """Prefill/decode (or aggregated) roles of the config's topology: the schema's list of
    Role objects (agentperf/schema/deployment.py: ``name``, ``workers``,
    ``accelerators_per_worker``, parallelism degrees, ``hardware``; docs/catalog.md). A
    role's accelerators are workers × accelerators per worker; the other fields, as stored,
    are its details. [] for a config without a topology."""
    out = []
    skip = {"name", "workers", "accelerators_per_worker"}
    for role in config.topology.roles:
        stored = redact(role.model_dump(exclude_unset=True))
        details = [(humanize(k), _scalar(v)) for k, v in stored.items() if k not in skip]
        out.append(
            Role(role.name, role.workers, role.accelerators, role.accelerators_per_worker, details)
        )
    return out
