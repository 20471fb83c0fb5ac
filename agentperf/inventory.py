"""The inventory of what served a run, and its check against the config (DB-free).

The runner reports it in ``CompletionReport.telemetry.inventory`` (agentperf/contract.py
``HostInventory``; stored in ``BenchmarkRun.telemetry``): the accelerators the deployment
was given (model, UUID, serial, VBIOS, clocks, power limit, ECC), the host's driver and
CUDA, the peer topology, the runtime (image as resolved, entrypoint, user), what the server
says it is, and the machine. ``check_inventory`` compares it with the config and the
catalog's hardware system: docs/verification.md "inventory".

Every field but the accelerators list is optional: a host reports what it can read, and a
field it could not read is absent, never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, with_config
from typing_extensions import TypedDict

from agentperf.verification.status import FAIL, PASS, WARN

NAME = "inventory"
POWER_TOLERANCE_W = 1.0  # NVML reports limits in mW; a set cap reads back within a watt
CLOCK_TOLERANCE_MHZ = 15  # a locked clock reads back on the nearest supported step


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True)


class AcceleratorClocks(_Doc):
    """MHz; None where the tool did not report it."""

    sm_current_mhz: int | None = None
    sm_application_mhz: int | None = None
    sm_default_application_mhz: int | None = None
    sm_max_mhz: int | None = None
    sm_locked_min_mhz: int | None = None
    sm_locked_max_mhz: int | None = None
    memory_current_mhz: int | None = None
    memory_application_mhz: int | None = None
    memory_default_application_mhz: int | None = None
    memory_max_mhz: int | None = None
    memory_locked_min_mhz: int | None = None
    memory_locked_max_mhz: int | None = None


class AcceleratorRecord(_Doc):
    index: int = Field(ge=0)
    name: str = Field(min_length=1, max_length=200)
    uuid: str | None = Field(default=None, max_length=100)
    serial: str | None = Field(default=None, max_length=100)
    pci_bus_id: str | None = Field(default=None, max_length=50)
    minor_number: int | None = Field(default=None, ge=0)  # /dev/nvidiaN
    vbios: str | None = Field(default=None, max_length=100)
    memory_total_mib: float | None = None
    power_limit_w: float | None = None
    power_default_limit_w: float | None = None
    ecc_enabled: bool | None = None
    clocks: AcceleratorClocks = Field(default_factory=AcceleratorClocks)


class RuntimeRecord(_Doc):
    launcher: str = Field(max_length=50)
    image_reference: str | None = Field(default=None, max_length=500)
    image_digest: str | None = Field(default=None, max_length=100)  # as the runtime resolved
    entrypoint: list[str] = Field(default_factory=list, max_length=200)
    user: str | None = Field(default=None, max_length=100)


class ServerSettings(_Doc):
    """The serving engine's effective settings as the running server reports them
    (docs/verification.md "inventory"); None: not reported. ``sources`` names where each
    was read: vLLM's ``/v1/models`` (max_model_len), its ``vllm:cache_config_info`` series in
    ``/metrics`` (prefix caching, cache dtype, block size, KV-cache size) and the engine's
    own start-up line in its log (dtype, chunked prefill)."""

    max_model_len: int | None = None
    prefix_caching: bool | None = None
    chunked_prefill: bool | None = None
    dtype: str | None = Field(default=None, max_length=50)
    kv_cache_dtype: str | None = Field(default=None, max_length=50)
    kv_cache_tokens: int | None = None
    block_size: int | None = None
    sources: dict[str, str] = Field(default_factory=dict, max_length=20)


class ServerRecord(_Doc):
    """What the server says it is (``/version``, ``/v1/models``, build info in ``/metrics``)."""

    engine_name: str | None = Field(default=None, max_length=100)
    engine_version: str | None = Field(default=None, max_length=100)
    source: str | None = Field(default=None, max_length=200)
    models: list[str] = Field(default_factory=list, max_length=100)
    settings: ServerSettings | None = None


class MachineRecord(_Doc):
    cpu_model: str | None = Field(default=None, max_length=200)
    cpu_count: int | None = None
    memory_total_mib: float | None = None
    kernel: str | None = Field(default=None, max_length=200)


@with_config(ConfigDict(extra="forbid", strict=True))
class PeerTopology(TypedDict):
    """How the accelerators connect, as NVML reports it (runner/worker/host_inventory.py):
    NVLink links up per accelerator index, and each pair's (``"0-1"``) common PCIe
    ancestor level (NVML's nvmlGpuTopologyLevel_t: 0 internal … 50 system). A typed dict:
    read as the collector wrote it."""

    source: str
    nvlinks_up: dict[str, int]
    common_ancestor: dict[str, int]


class Inventory(_Doc):
    """What served the run, as the runner host read it."""

    tool: str = Field(max_length=100)  # "nvml", "nvidia-smi -q -x", "amd-smi", "none"
    driver_version: str | None = Field(default=None, max_length=100)
    cuda_version: str | None = Field(default=None, max_length=100)
    accelerators: list[AcceleratorRecord] = Field(max_length=1024)
    topology: PeerTopology | None = None  # NVLink links and PCIe ancestors (NVML only)
    runtime: RuntimeRecord | None = None
    server: ServerRecord | None = None
    machine: MachineRecord | None = None
    # the pool's device entries the launched server was given (runner/launchers/devices.py;
    # None: no launched server, e.g. an attached endpoint)
    granted: list[str] | None = Field(default=None, max_length=1024)
    # why a tool tried before the one named did not answer (no driver, no nvidia-smi)
    notes: list[str] = Field(default_factory=list, max_length=20)


def runtime_from_inspect(
    inspect: Any, *, command: list[str] | None = None, secrets: list[str] | None = None
) -> dict[str, Any]:
    """The runtime record from ``podman inspect CONTAINER`` (its JSON list or one object): the
    image as the runtime resolved it, the entrypoint (with its command) and the user. The
    container launcher puts it in ``Endpoint.info["runtime"]``.

    The record is published (the result page, the public API): ``command``, the launch's
    command as the config wrote it (a secret shown as ``<secret NAME>``), replaces the
    container's Entrypoint and Cmd (the launcher sets the entrypoint to the command's first
    item and passes the rest, substituted); any of ``secrets`` left in the record is
    redacted."""
    doc = inspect[0] if isinstance(inspect, list) and inspect else inspect
    if not isinstance(doc, dict):
        return {}
    config = doc.get("Config") or {}
    entrypoint = config.get("Entrypoint") or []
    if isinstance(entrypoint, str):
        entrypoint = [entrypoint]
    if command is None:
        command = config.get("Cmd") or []
        if isinstance(command, str):
            command = [command]
    else:
        entrypoint = []
    # the manifest digest the container's image was resolved by: the one in its name (the
    # launcher pulled by that digest and found it among the image's repository digests);
    # else Podman's ImageDigest (the manifest as stored, which a re-encoded local copy
    # may give another digest)
    name = doc.get("ImageName")
    digest = doc.get("ImageDigest")
    if isinstance(name, str) and "@sha256:" in name:
        digest = name.split("@", 1)[1]
    hidden = sorted({s for s in secrets or [] if s}, key=len, reverse=True)

    def shown(value: Any) -> str:
        text = str(value)
        for secret in hidden:
            text = text.replace(secret, "[redacted]")
        return text

    user = config.get("User")
    return {
        "image_reference": shown(name) if isinstance(name, str) else None,
        "image_digest": shown(digest) if isinstance(digest, str) else None,
        "entrypoint": [shown(x) for x in [*entrypoint, *command]][:200],
        "user": shown(user) if user not in (None, "") else None,
    }


# --- the check -------------------------------------------------------------------------------


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _version(text: str) -> str:
    """A version without a leading v and without a local build suffix (+cu128)."""
    return text.strip().lower().removeprefix("v").split("+", 1)[0]


def _locked(acc: AcceleratorRecord, kind: str) -> int | None:
    """The clock a lock holds: the locked range when min == max, else the application
    clock where it was set away from its default (what `nvidia-smi -ac` sets), else None:
    not reported (NVML has no reading of `nvidia-smi -lgc` locks)."""
    c = acc.clocks
    low, high, app, default = (
        (
            c.sm_locked_min_mhz,
            c.sm_locked_max_mhz,
            c.sm_application_mhz,
            c.sm_default_application_mhz,
        )
        if kind == "sm"
        else (
            c.memory_locked_min_mhz,
            c.memory_locked_max_mhz,
            c.memory_application_mhz,
            c.memory_default_application_mhz,
        )
    )
    if low is not None and high is not None and low == high:
        return low
    if app is not None and (default is None or app != default):
        return app
    return None


# the config's precision names -> the torch dtype names a server reports
_DTYPES = {
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
}


def _arg(args: list[Any], *names: str) -> str | None:
    """The value of the last ``--name V`` or ``--name=V`` among ``args`` (strings only)."""
    found = None
    items = [a for a in args if isinstance(a, str)]
    for i, item in enumerate(items):
        for name in names:
            if item == name and i + 1 < len(items):
                found = items[i + 1]
            elif item.startswith(name + "="):
                found = item.split("=", 1)[1]
    return found


def _flag(args: list[Any], name: str) -> bool | None:
    """``--name`` → True, ``--no-name`` → False (the last one wins), absent → None."""
    found = None
    for item in args:
        if item == f"--{name}":
            found = True
        elif item == f"--no-{name}":
            found = False
    return found


def declared_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """What the config declares of the settings a server reports (ServerSettings): the
    launch's own arguments first (what the server was started with), then the config's
    fields (``kv_cache.prefix_caching``, ``model.kv_cache_dtype``). Only vLLM's arguments
    are read; another engine declares nothing here, and nothing is compared."""
    if ((config.get("engine") or {}).get("name")) != "vllm":
        return {}
    args = list((config.get("launch") or {}).get("args") or [])
    out: dict[str, Any] = {}
    length = _arg(args, "--max-model-len")
    if length is not None and length.isdigit():
        out["max_model_len"] = int(length)
    dtype = _arg(args, "--dtype")
    if dtype is not None and dtype != "auto":
        out["dtype"] = _DTYPES.get(dtype.lower(), dtype.lower())
    chunked = _flag(args, "enable-chunked-prefill")
    if chunked is not None:
        out["chunked_prefill"] = chunked
    prefix = _flag(args, "enable-prefix-caching")
    declared_prefix = (config.get("kv_cache") or {}).get("prefix_caching")
    if prefix is not None:
        out["prefix_caching"] = prefix
    elif isinstance(declared_prefix, bool):
        out["prefix_caching"] = declared_prefix
    kv = (config.get("model") or {}).get("kv_cache_dtype")
    if isinstance(kv, str) and kv.lower() in _DTYPES:
        out["kv_cache_dtype"] = _DTYPES[kv.lower()]
    return out


def compare_settings(
    declared: Mapping[str, Any], reported: ServerSettings | None
) -> tuple[dict[str, Any], list[str], list[str]]:
    """(compared, mismatches, not reported) of the declared settings against the server's."""
    compared: dict[str, Any] = {}
    mismatches: list[str] = []
    unchecked: list[str] = []
    for name, value in declared.items():
        got = getattr(reported, name, None) if reported is not None else None
        if name == "kv_cache_dtype" and got == "auto" and reported is not None:
            got = reported.dtype  # vLLM's "auto" cache dtype is the model's dtype
        compared[name] = {"declared": value, "server": got}
        if got is None:
            unchecked.append(f"{name} not reported by the server")
        elif got != value:
            source = reported.sources.get(name, "the server") if reported is not None else ""
            mismatches.append(f"{name} {value!r} declared; {source} reports {got!r}")
    return compared, mismatches, unchecked


def _result(status: str, summary: str, evidence: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": NAME,
        "status": status,
        "summary": summary,
        "rule": (
            "the inventory of what served equals the config: the hardware system's "
            "accelerator, the accelerators used, the power cap, declared clock locks, and "
            "the engine name and version the server reports, and the engine settings the "
            "launch declares (vLLM: max model length, dtype, prefix caching, chunked prefill, "
            "KV-cache dtype) as the running server reports them"
        ),
        "evidence": evidence,
    }


@dataclass(slots=True)
class _Comparison:
    """What ``check_inventory`` compared so far: each declared figure beside the inventory's,
    what disagrees, and what the host did not report (never guessed)."""

    compared: dict[str, Any] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)


def _compare_accelerators(
    inv: Inventory, cmp: _Comparison, *, accelerator: str, accelerators_used: int | None
) -> tuple[int, list[str]]:
    """How many accelerators served and their names, against the config's count and the
    catalog system's accelerator; a CPU system (the demo's local-cpu) has the machine as
    its one "accelerator". Returns (served, names)."""
    accs = inv.accelerators
    cpu_system = _norm(accelerator) == "cpu"
    cpu = inv.machine.cpu_model if inv.machine is not None else None
    served = len(accs) if not cpu_system else (1 if cpu and not accs else len(accs))
    if accelerators_used is not None:
        cmp.compared["accelerators_used"] = {"declared": accelerators_used, "inventory": served}
        if served != accelerators_used:
            cmp.mismatches.append(
                f"the config uses {accelerators_used} accelerators; the inventory lists {served}"
            )
    names = sorted({a.name for a in accs})
    if cpu_system and cpu and not accs:
        names = [f"CPU: {cpu}"]
    cmp.compared["accelerator"] = {"catalog": accelerator or None, "inventory": names}
    if cpu_system and accs:
        cmp.mismatches.append(f"the hardware system is a CPU; the inventory lists {names}")
    elif accelerator and accs:
        wrong = [n for n in names if _norm(accelerator) not in _norm(n)]
        if wrong:
            cmp.mismatches.append(
                f"the hardware system has {accelerator}; the inventory lists {wrong}"
            )
    return served, names


def _compare_clocks(
    accs: list[AcceleratorRecord], clocks: Mapping[str, Any], cmp: _Comparison
) -> None:
    """The declared power cap and clock locks against what each accelerator holds."""
    cap = clocks.get("power_cap_w")
    if cap is not None:
        limits = [a.power_limit_w for a in accs]
        cmp.compared["power_cap_w"] = {"declared": cap, "inventory": limits}
        if any(v is None for v in limits) or not accs:
            cmp.unchecked.append("power limit not reported")
        elif any(abs(float(v) - float(cap)) > POWER_TOLERANCE_W for v in limits if v is not None):
            cmp.mismatches.append(
                f"power cap declared {cap} W; the accelerators' limits are {limits} W"
            )
    for key, kind in (("gpu_clock_mhz", "sm"), ("memory_clock_mhz", "memory")):
        declared = clocks.get(key)
        if declared is None:
            continue
        held = [_locked(a, kind) for a in accs]
        cmp.compared[key] = {"declared": declared, "inventory": held}
        if any(v is None for v in held) or not accs:
            cmp.unchecked.append(f"{kind} clock lock not reported")
        elif any(abs(v - int(declared)) > CLOCK_TOLERANCE_MHZ for v in held if v is not None):
            cmp.mismatches.append(
                f"{kind} clock locked at {declared} MHz declared; held: {held} MHz"
            )


def _compare_engine(
    server: ServerRecord | None, engine: Mapping[str, Any], cmp: _Comparison
) -> None:
    """The declared engine's name and version against what the server says it is."""
    if server is None or (server.engine_name is None and server.engine_version is None):
        cmp.unchecked.append("the server reported no engine name or version")
        return
    cmp.compared["engine"] = {
        "declared": {"name": engine.get("name"), "version": engine.get("version")},
        "server": {"name": server.engine_name, "version": server.engine_version},
        "source": server.source,
    }
    if server.engine_name and engine.get("name"):
        if _norm(str(engine["name"])) not in _norm(server.engine_name):
            cmp.mismatches.append(
                f"engine {engine['name']!r} declared; the server says {server.engine_name!r}"
            )
    if engine.get("version") and not server.engine_version:
        cmp.unchecked.append("the server reported no engine version")
    if server.engine_version and engine.get("version"):
        if _version(server.engine_version) != _version(str(engine["version"])):
            cmp.mismatches.append(
                f"engine version {engine['version']!r} declared; the server reports "
                f"{server.engine_version!r}"
            )


def check_inventory(
    inventory: Mapping[str, Any] | None,
    config: Mapping[str, Any],
    *,
    accelerator: str,
    accelerators_used: int | None,
) -> dict[str, Any]:
    """One verification check (docs/verification.md "inventory"); ``accelerator`` is the
    catalog hardware system's accelerator name ("" when the catalog has none)."""
    if not inventory:
        return _result(
            WARN,
            "not checked: the runner recorded no inventory of what served",
            {"inventory": None},
        )
    inv = Inventory.model_validate(inventory)
    cmp = _Comparison()
    served, names = _compare_accelerators(
        inv, cmp, accelerator=accelerator, accelerators_used=accelerators_used
    )
    _compare_clocks(inv.accelerators, config.get("clocks") or {}, cmp)
    _compare_engine(inv.server, config.get("engine") or {}, cmp)
    declared = declared_settings(config)
    if declared:
        settings_compared, wrong, missing = compare_settings(
            declared, inv.server.settings if inv.server is not None else None
        )
        cmp.compared["settings"] = settings_compared
        cmp.mismatches += wrong
        cmp.unchecked += missing
    evidence = {
        "compared": cmp.compared,
        "mismatches": cmp.mismatches,
        "not_reported": cmp.unchecked,
        "tool": inv.tool,
        "driver_version": inv.driver_version,
        "uuids": [a.uuid for a in inv.accelerators],
        "notes": inv.notes,
    }
    if cmp.mismatches:
        return _result(FAIL, "; ".join(cmp.mismatches), evidence)
    if cmp.unchecked:
        return _result(
            WARN, "matches where reported; not reported: " + ", ".join(cmp.unchecked), evidence
        )
    return _result(PASS, f"{served} × {', '.join(names)} as declared ({inv.tool})", evidence)


SLURM_NAME = "slurm_nodes"


def check_slurm_nodes(
    layout: Mapping[str, Any] | None, *, accelerator: str, accelerators_used: int | None
) -> dict[str, Any]:
    """A Slurm run's check across its nodes (docs/verification.md "inventory", docs/pipeline.md
    "Slurm"): the accelerators Slurm gave the job's tasks add up to the config's
    `accelerators_used`, and every node that served with accelerators lists the catalog
    hardware system's accelerator in its own inventory (a CPU system: the node's CPU and no
    accelerator). A node that reported no inventory is a warning, never a pass."""

    def result(status: str, summary: str, evidence: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": SLURM_NAME,
            "status": status,
            "summary": summary,
            "rule": (
                "the accelerators of all roles add up to the accelerators used, and each "
                "node's inventory lists the declared hardware"
            ),
            "evidence": evidence,
        }

    if not layout:
        return result(WARN, "not checked: the run reported no Slurm layout", {"layout": None})
    nodes = [n for n in layout.get("nodes") or [] if int(n.get("gpus") or 0) > 0]
    given = sum(int(n.get("gpus") or 0) for n in nodes)
    mismatches: list[str] = []
    unreported: list[str] = []
    per_node: list[dict[str, Any]] = []
    cpu_system = _norm(accelerator) == "cpu"
    if accelerators_used is not None and given != accelerators_used:
        mismatches.append(
            f"the job's tasks hold {given} accelerators; the config uses {accelerators_used}"
        )
    for node in nodes:
        name = str(node.get("node"))
        raw = node.get("inventory") or {}
        try:
            inv = Inventory.model_validate(
                {k: v for k, v in raw.items() if k in Inventory.model_fields}
            )
        except ValueError:
            inv = None
        if inv is None:
            unreported.append(name)
            per_node.append({"node": name, "gpus": node.get("gpus"), "inventory": None})
            continue
        names = sorted({a.name for a in inv.accelerators})
        cpu = inv.machine.cpu_model if inv.machine is not None else None
        per_node.append({"node": name, "gpus": node.get("gpus"), "accelerators": names, "cpu": cpu})
        if cpu_system:
            if names:
                mismatches.append(f"node {name}: the hardware system is a CPU; it lists {names}")
            elif not cpu:
                unreported.append(name)
        elif not names:
            unreported.append(name)
        elif accelerator:
            wrong = [n for n in names if _norm(accelerator) not in _norm(n)]
            if wrong:
                mismatches.append(f"node {name}: {accelerator} declared; it lists {wrong}")
    evidence = {
        "given": given,
        "used": accelerators_used,
        "accelerator": accelerator or None,
        "nodes": per_node,
        "mismatches": mismatches,
        "not_reported": unreported,
    }
    if mismatches:
        return result(FAIL, "; ".join(mismatches), evidence)
    if unreported:
        return result(
            WARN, "no inventory of what served on node(s) " + ", ".join(unreported), evidence
        )
    return result(
        PASS,
        f"{given} accelerators over {len(nodes)} node(s), each listing "
        f"{'its CPU' if cpu_system else accelerator}",
        evidence,
    )
