"""Collect the inventory of what served a run on the pool host (DB-free).

``collect_inventory`` reads, once the server answers (docs/verification.md "inventory"):

- the accelerators the launched server was given (runner/launchers/devices.py grant; an
  attached endpoint: every accelerator the host lists), from NVML (``nvidia-ml-py``) or, where
  NVML cannot start, ``nvidia-smi -q -x``; AMD from ``amd-smi static --json``: model, UUID,
  serial, PCI bus id, VBIOS, memory, power limits, ECC, current / application / default /
  max clocks, and the peer topology (NVLink links up, common PCIe ancestor);
- the runtime: the launcher, and what the launcher recorded in ``Endpoint.info["runtime"]``
  (the container launcher fills it from ``podman inspect``: agentperf/inventory.py
  ``runtime_from_inspect``);
- the server: what it says it is (``/version``, ``/v1/models`` ``owned_by``, llama.cpp's
  ``/props`` ``build_info``, a ``*build_info{version=…}`` series in ``/metrics``);
- the machine: CPU model and count, memory, kernel.

A field the host could not read is absent, never guessed. The document is
agentperf/inventory.py ``Inventory``; the worker posts it in the completion's
``telemetry.inventory``.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agentperf.inventory import Inventory
from runner.launchers.base import Endpoint, http_get
from runner.launchers.devices import DeviceGrant

SMI_TIMEOUT_S = 30
SERVER_TIMEOUT_S = 5.0
UNKNOWN_VERSIONS = {"", "unknown", "b0-unknown", "0", "none", "n/a"}


# --- accelerators: NVML ------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _call(lib: Any, name: str, *args: Any) -> Any:
    """One NVML call; None where the board or driver does not support it."""
    try:
        return getattr(lib, name)(*args)
    except Exception:  # pynvml.NVMLError_NotSupported and its siblings
        return None


def _mhz(value: Any) -> int | None:
    return None if value is None else int(value)


def _nvml_accelerator(lib: Any, index: int, handle: Any) -> dict[str, Any]:
    sm, mem = lib.NVML_CLOCK_SM, lib.NVML_CLOCK_MEM
    memory = _call(lib, "nvmlDeviceGetMemoryInfo", handle)
    pci = _call(lib, "nvmlDeviceGetPciInfo", handle)
    ecc = _call(lib, "nvmlDeviceGetEccMode", handle)  # (current, pending)
    limit = _call(lib, "nvmlDeviceGetEnforcedPowerLimit", handle)  # mW
    default = _call(lib, "nvmlDeviceGetPowerManagementDefaultLimit", handle)
    serial = _call(lib, "nvmlDeviceGetSerial", handle)
    vbios = _call(lib, "nvmlDeviceGetVbiosVersion", handle)
    minor = _call(lib, "nvmlDeviceGetMinorNumber", handle)
    return {
        "index": index,
        "name": _text(lib.nvmlDeviceGetName(handle)),
        "uuid": _text(lib.nvmlDeviceGetUUID(handle)),
        "serial": None if serial is None else _text(serial),
        "pci_bus_id": None if pci is None else _text(pci.busId),
        "minor_number": None if minor is None else int(minor),
        "vbios": None if vbios is None else _text(vbios),
        "memory_total_mib": None if memory is None else memory.total / 2**20,
        "power_limit_w": None if limit is None else float(limit) / 1000.0,
        "power_default_limit_w": None if default is None else float(default) / 1000.0,
        "ecc_enabled": None if ecc is None else bool(ecc[0]),
        "clocks": {
            "sm_current_mhz": _mhz(_call(lib, "nvmlDeviceGetClockInfo", handle, sm)),
            "sm_application_mhz": _mhz(_call(lib, "nvmlDeviceGetApplicationsClock", handle, sm)),
            "sm_default_application_mhz": _mhz(
                _call(lib, "nvmlDeviceGetDefaultApplicationsClock", handle, sm)
            ),
            "sm_max_mhz": _mhz(_call(lib, "nvmlDeviceGetMaxClockInfo", handle, sm)),
            "memory_current_mhz": _mhz(_call(lib, "nvmlDeviceGetClockInfo", handle, mem)),
            "memory_application_mhz": _mhz(
                _call(lib, "nvmlDeviceGetApplicationsClock", handle, mem)
            ),
            "memory_default_application_mhz": _mhz(
                _call(lib, "nvmlDeviceGetDefaultApplicationsClock", handle, mem)
            ),
            "memory_max_mhz": _mhz(_call(lib, "nvmlDeviceGetMaxClockInfo", handle, mem)),
        },
    }


def _nvml_topology(lib: Any, handles: list[tuple[int, Any]]) -> dict[str, Any]:
    """NVLink links up per accelerator, and each pair's common PCIe ancestor level
    (NVML's nvmlGpuTopologyLevel_t: 0 internal … 50 system)."""
    links: dict[str, int] = {}
    for index, handle in handles:
        up = 0
        for link in range(int(getattr(lib, "NVML_NVLINK_MAX_LINKS", 18))):
            state = _call(lib, "nvmlDeviceGetNvLinkState", handle, link)
            if state is None:
                break
            up += int(bool(state))
        links[str(index)] = up
    pairs: dict[str, int] = {}
    for i, (a, ha) in enumerate(handles):
        for b, hb in handles[i + 1 :]:
            level = _call(lib, "nvmlDeviceGetTopologyCommonAncestor", ha, hb)
            if level is not None:
                pairs[f"{a}-{b}"] = int(level)
    return {"source": "nvml", "nvlinks_up": links, "common_ancestor": pairs}


def nvml_inventory(lib: Any, minors: Iterable[int] | None) -> dict[str, Any]:
    """The NVML part of the inventory; ``minors``: only those devices (None: all).
    Raises whatever NVML raises when it cannot start."""
    lib.nvmlInit()
    try:
        wanted = None if minors is None else set(minors)
        handles = []
        accelerators = []
        for index in range(int(lib.nvmlDeviceGetCount())):
            handle = lib.nvmlDeviceGetHandleByIndex(index)
            record = _nvml_accelerator(lib, index, handle)
            if wanted is not None and record["minor_number"] not in wanted:
                continue
            handles.append((index, handle))
            accelerators.append(record)
        driver = _call(lib, "nvmlSystemGetDriverVersion")
        cuda = _call(lib, "nvmlSystemGetCudaDriverVersion")  # 12040 → "12.4"
        return {
            "tool": "nvml",
            "driver_version": None if driver is None else _text(driver),
            "cuda_version": None
            if cuda is None
            else f"{int(cuda) // 1000}.{int(cuda) % 1000 // 10}",
            "accelerators": accelerators,
            "topology": _nvml_topology(lib, handles) if len(handles) > 1 else None,
        }
    finally:
        _call(lib, "nvmlShutdown")


# --- accelerators: nvidia-smi -q -x ------------------------------------------------------------


def _xml_text(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    text = found.text.strip()
    return (
        None
        if not text or text.upper() in ("N/A", "[N/A]") or "not supported" in text.lower()
        else text
    )


def _xml_number(node: ET.Element | None, *paths: str) -> float | None:
    for path in paths:
        text = _xml_text(node, path)
        if text is None:
            continue
        match = re.match(r"^\s*(-?\d+(?:\.\d+)?)", text)
        if match:
            return float(match.group(1))
    return None


def _xml_int(node: ET.Element | None, *paths: str) -> int | None:
    value = _xml_number(node, *paths)
    return None if value is None else int(value)


def parse_nvidia_smi_xml(text: str, minors: Iterable[int] | None = None) -> dict[str, Any]:
    """``nvidia-smi -q -x`` (the ``nvidia_smi_log`` document of NVIDIA's nvsmi DTD): the same
    fields as NVML where the XML has them. Power readings are under ``gpu_power_readings``
    (newer drivers) or ``power_readings`` (older: ``power_limit``)."""
    root = ET.fromstring(text)
    wanted = None if minors is None else set(minors)
    accelerators = []
    for index, gpu in enumerate(root.findall("gpu")):
        minor = _xml_int(gpu, "minor_number")
        if wanted is not None and minor not in wanted:
            continue
        power = gpu.find("gpu_power_readings")
        if power is None:
            power = gpu.find("power_readings")
        ecc = _xml_text(gpu, "ecc_mode/current_ecc")
        accelerators.append(
            {
                "index": index,
                "name": _xml_text(gpu, "product_name") or f"GPU {index}",
                "uuid": _xml_text(gpu, "uuid"),
                "serial": _xml_text(gpu, "serial"),
                "pci_bus_id": _xml_text(gpu, "pci/pci_bus_id") or gpu.get("id"),
                "minor_number": minor,
                "vbios": _xml_text(gpu, "vbios_version"),
                "memory_total_mib": _xml_number(gpu, "fb_memory_usage/total"),
                "power_limit_w": _xml_number(
                    power, "enforced_power_limit", "current_power_limit", "power_limit"
                ),
                "power_default_limit_w": _xml_number(power, "default_power_limit"),
                "ecc_enabled": None if ecc is None else ecc.lower() == "enabled",
                "clocks": {
                    "sm_current_mhz": _xml_int(gpu, "clocks/sm_clock"),
                    "sm_application_mhz": _xml_int(gpu, "applications_clocks/graphics_clock"),
                    "sm_default_application_mhz": _xml_int(
                        gpu, "default_applications_clocks/graphics_clock"
                    ),
                    "sm_max_mhz": _xml_int(gpu, "max_clocks/sm_clock"),
                    "memory_current_mhz": _xml_int(gpu, "clocks/mem_clock"),
                    "memory_application_mhz": _xml_int(gpu, "applications_clocks/mem_clock"),
                    "memory_default_application_mhz": _xml_int(
                        gpu, "default_applications_clocks/mem_clock"
                    ),
                    "memory_max_mhz": _xml_int(gpu, "max_clocks/mem_clock"),
                },
            }
        )
    return {
        "tool": "nvidia-smi -q -x",
        "driver_version": _xml_text(root, "driver_version"),
        "cuda_version": _xml_text(root, "cuda_version"),
        "accelerators": accelerators,
        "topology": None,
    }


# --- accelerators: amd-smi ---------------------------------------------------------------------


def _dig(row: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(row, dict):
            return None
        row = row.get(key)
    return None if row in ("N/A", "") else row


def parse_amd_smi_static(text: str) -> dict[str, Any]:
    """``amd-smi static --json``: a list of GPUs (or ``{"gpu_data": [...]}`` in newer ROCm)."""
    data = json.loads(text)
    if isinstance(data, dict):
        data = data.get("gpu_data") or []
    accelerators = []
    driver = None
    for row in data if isinstance(data, list) else []:
        if not isinstance(row, dict) or not isinstance(row.get("gpu"), int):
            continue
        driver = driver or _dig(row, "driver", "version")
        accelerators.append(
            {
                "index": row["gpu"],
                "name": str(_dig(row, "asic", "market_name") or f"AMD GPU {row['gpu']}"),
                "uuid": _dig(row, "uuid") and str(_dig(row, "uuid")),
                "serial": _dig(row, "board", "product_serial")
                and str(_dig(row, "board", "product_serial")),
                "pci_bus_id": _dig(row, "bus", "bdf") and str(_dig(row, "bus", "bdf")),
                "vbios": _dig(row, "vbios", "version") and str(_dig(row, "vbios", "version")),
            }
        )
    return {
        "tool": "amd-smi",
        "driver_version": None if driver is None else str(driver),
        "accelerators": accelerators,
    }


# --- the machine, the runtime, the server ------------------------------------------------------


def machine_record(proc: str = "/proc") -> dict[str, Any]:
    cpu_model = None
    try:
        for line in Path(proc, "cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                cpu_model = value.strip()
                break
    except OSError:
        pass
    memory = None
    try:
        match = re.search(r"^MemTotal:\s+(\d+) kB", Path(proc, "meminfo").read_text(), re.MULTILINE)
        memory = None if match is None else int(match.group(1)) / 1024
    except OSError:
        pass
    uname = platform.uname()
    return {
        "cpu_model": cpu_model or (uname.processor or None),
        "cpu_count": os.cpu_count(),
        "memory_total_mib": memory,
        "kernel": f"{uname.system} {uname.release}",
    }


def runtime_record(info: dict[str, Any]) -> dict[str, Any]:
    """From the launcher's endpoint info: its ``runtime`` section where it wrote one."""
    runtime = dict(info.get("runtime") or {})
    record = {
        "launcher": str(info.get("launcher") or "unknown"),
        "image_reference": runtime.get("image_reference"),
        "image_digest": runtime.get("image_digest"),
        "entrypoint": [str(x) for x in runtime.get("entrypoint") or info.get("command") or []][
            :200
        ],
        "user": runtime.get("user"),
    }
    return record


def _get_json(endpoint: Endpoint, path: str) -> Any:
    base = str(endpoint.base_url).rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    body = http_get(
        base + path, timeout_s=SERVER_TIMEOUT_S, headers=headers, connect=endpoint.connect
    )
    return body.decode("utf-8", "replace") if path == "/metrics" else json.loads(body)


_ENGINES = {"llamacpp": "llama.cpp", "vllm": "vllm", "sglang": "sglang", "tensorrt": "tensorrt-llm"}


_CACHE_INFO = re.compile(r"^vllm:cache_config_info\{([^}]*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
# vLLM's start-up line: "Initializing a V1 LLM engine (v0.32.0) with config: model=…, dtype=…"
_ENGINE_CONFIG = re.compile(r"Initializing a V\d LLM engine \(v[^)]*\) with config: (.*)")
_TRUTH = {"true": True, "false": False}


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def server_settings(
    listed: Any, metrics_text: str | None, log_text: str = ""
) -> dict[str, Any] | None:
    """vLLM's effective settings (agentperf/inventory.py ``ServerSettings``) from its
    ``/v1/models`` answer, its ``/metrics`` text and its own log; None where none is
    reported (another engine)."""
    out: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for item in (listed or {}).get("data") or [] if isinstance(listed, dict) else []:
        length = item.get("max_model_len") if isinstance(item, dict) else None
        if isinstance(length, int) and not isinstance(length, bool):
            out["max_model_len"], sources["max_model_len"] = length, "/v1/models max_model_len"
            break
    match = _CACHE_INFO.search(metrics_text or "")
    if match:
        labels = dict(_LABEL.findall(match.group(1)))
        where = "/metrics vllm:cache_config_info"
        if labels.get("enable_prefix_caching", "").lower() in _TRUTH:
            out["prefix_caching"] = _TRUTH[labels["enable_prefix_caching"].lower()]
            sources["prefix_caching"] = where
        if labels.get("cache_dtype"):
            out["kv_cache_dtype"], sources["kv_cache_dtype"] = labels["cache_dtype"][:50], where
        for key, label in (
            ("kv_cache_tokens", "kv_cache_size_tokens"),
            ("block_size", "block_size"),
        ):
            value = _int(labels.get(label))
            if value is not None:
                out[key], sources[key] = value, where
    found = _ENGINE_CONFIG.findall(log_text)
    if found:
        config = found[-1]
        where = "the engine's start-up line in its log"
        dtype = re.search(r"\bdtype=(?:torch\.)?(\w+)", config)
        if dtype:
            out["dtype"], sources["dtype"] = dtype.group(1)[:50], where
        chunked = re.search(r"\benable_chunked_prefill=(True|False)", config)
        if chunked:
            out["chunked_prefill"], sources["chunked_prefill"] = chunked.group(1) == "True", where
        if "prefix_caching" not in out:
            prefix = re.search(r"\benable_prefix_caching=(True|False)", config)
            if prefix:
                out["prefix_caching"] = prefix.group(1) == "True"
                sources["prefix_caching"] = where
    if not out:
        return None
    out["sources"] = sources
    return out


def server_record(get: Callable[[str], Any], log_text: str = "") -> dict[str, Any]:
    """What the server says it is. ``get(path)`` returns the parsed JSON (``/metrics``: the
    text) or raises; each source that answers adds to ``source``. ``log_text``: the
    server's own output so far (vLLM prints its effective config there)."""
    name = version = None
    sources: list[str] = []
    models: list[str] = []
    listed: Any = None
    metrics_text: str | None = None
    try:
        listed = get("/v1/models")
        for item in listed.get("data") or []:
            models.append(str(item.get("id")))
            owner = str(item.get("owned_by") or "").lower()
            name = name or next((v for k, v in _ENGINES.items() if k in owner), None)
        if name:
            sources.append("/v1/models owned_by")
    except Exception:
        pass
    try:
        answer = get("/version")
        got = answer.get("version") if isinstance(answer, dict) else None
        if isinstance(got, str) and got.strip().lower() not in UNKNOWN_VERSIONS:
            version = got.strip()
            sources.append("/version")
    except Exception:
        pass
    if version is None:
        try:
            props = get("/props")
            build = props.get("build_info") if isinstance(props, dict) else None
            if isinstance(build, str):
                sources.append(f"/props build_info={build[:60]}")
                if build.strip().lower() not in UNKNOWN_VERSIONS:
                    version = build.strip()
                name = name or "llama.cpp"
        except Exception:
            pass
    try:
        metrics_text = str(get("/metrics"))
    except Exception:
        metrics_text = None
    if version is None and metrics_text is not None:
        try:
            text = metrics_text
            match = re.search(
                r'^([a-zA-Z_:][\w:]*build_info)\{[^}]*\bversion="([^"]+)"', text, re.MULTILINE
            )
            if match:
                version = match.group(2)
                sources.append(f"/metrics {match.group(1)}")
                prefix = match.group(1).split(":")[0].split("_")[0].lower()
                name = name or _ENGINES.get(prefix, prefix or None)
        except Exception:
            pass
    return {
        "engine_name": name,
        "engine_version": version[:100] if version else None,
        "source": "; ".join(sources)[:200] or None,
        "models": models[:100],
        "settings": server_settings(listed, metrics_text, log_text),
    }


# --- the whole document ------------------------------------------------------------------------


def accelerator_inventory(
    grant: DeviceGrant | None, *, nvml: Any = None, smi: str | None = None, amd: str | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The accelerators part and why each tool before the one used did not answer.
    ``grant``: only the granted ones (none granted: none); None: all the host lists."""
    reasons: list[str] = []
    if grant is not None and not grant.accelerators:
        return {"tool": "none", "accelerators": []}, ["the launched server was given none"]
    vendors = {a.vendor for a in grant.accelerators} if grant is not None else {"nvidia", "amd"}
    # only the granted devices, by their minor; where a grant's minors are not all known
    # (AMD, an unresolved CDI name) the host's list stands, and the count check says so
    minors = None
    if grant is not None and len(grant.minors()) == len(grant.accelerators):
        minors = grant.minors()
    if "nvidia" in vendors:
        lib = nvml
        if lib is None:
            import pynvml

            lib = pynvml
        try:
            return nvml_inventory(lib, minors), reasons
        except Exception as exc:  # pynvml.NVMLError: no driver, no library
            reasons.append(f"NVML: {exc}"[:200])
        tool = smi or shutil.which("nvidia-smi")
        if tool:
            try:
                out = subprocess.run(
                    [tool, "-q", "-x"], capture_output=True, text=True, timeout=SMI_TIMEOUT_S
                )
                if out.returncode == 0:
                    return parse_nvidia_smi_xml(out.stdout, minors), reasons
                reasons.append(f"nvidia-smi -q -x exited {out.returncode}")
            except (OSError, subprocess.SubprocessError, ET.ParseError) as exc:
                reasons.append(f"nvidia-smi -q -x: {exc}"[:200])
        else:
            reasons.append("no nvidia-smi on the runner host")
    if "amd" in vendors:
        tool = amd or shutil.which("amd-smi")
        if tool:
            try:
                out = subprocess.run(
                    [tool, "static", "--json"],
                    capture_output=True,
                    text=True,
                    timeout=SMI_TIMEOUT_S,
                )
                if out.returncode == 0:
                    return parse_amd_smi_static(out.stdout), reasons
                reasons.append(f"amd-smi static exited {out.returncode}")
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                reasons.append(f"amd-smi static: {exc}"[:200])
        else:
            reasons.append("no amd-smi on the runner host")
    return {"tool": "none", "accelerators": []}, reasons


def collect_inventory(
    endpoint: Endpoint,
    grant: DeviceGrant | None,
    *,
    nvml: Any = None,
    smi: str | None = None,
    amd: str | None = None,
    log_text: str = "",
) -> dict[str, Any]:
    """The inventory document (agentperf/inventory.py ``Inventory``, validated) of a served
    endpoint; ``nvml`` is the ``pynvml`` module to use (None: the real one); ``log_text``
    the launched server's output so far."""
    doc, notes = accelerator_inventory(grant, nvml=nvml, smi=smi, amd=amd)
    doc["notes"] = notes
    if grant is not None:
        doc["granted"] = [acc.entry for acc in grant.accelerators]
    doc["runtime"] = runtime_record(endpoint.info)
    doc["server"] = server_record(lambda path: _get_json(endpoint, path), log_text)
    doc["machine"] = machine_record()
    return Inventory.model_validate(doc).model_dump(mode="json")
