"""The accelerators a pool declares, and the ones one launched server is given (DB-free).

A pool host declares its devices in its environment (docs/security.md "Devices"):

- ``RUNNER_DEVICES``: comma-separated accelerators, one entry each, in the order they are
  handed out. An entry is a CDI name (``nvidia.com/gpu=0``, ``amd.com/gpu=1``; resolved
  through the CDI specs under ``RUNNER_CDI_SPEC_DIRS`` for the bubblewrap sandbox, passed
  as is to Podman) or device nodes (``/dev/nvidia0``; AMD ``/dev/dri/renderD128``; several
  nodes of one accelerator joined by ``+``). Unset or empty: the host has no accelerators
  to give, and a launched server gets none.
- ``RUNNER_SHARED_DEVICES``: comma-separated nodes every grant includes beside its
  accelerators. Default: the vendor's control nodes that exist on the host
  (``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ``/dev/nvidia-uvm-tools`` for NVIDIA nodes;
  ``/dev/kfd`` for AMD render nodes); CDI accelerators bring their spec's own.
- ``RUNNER_SHM_SIZE``: the size of ``/dev/shm`` inside the sandbox or container (``16g``,
  ``512m``, bytes); default 1 GiB.
- ``RUNNER_MEMLOCK``: the locked-memory limit (``unlimited``, ``64g``, bytes); default
  unlimited where accelerators are declared (engines pin host buffers for transfers), else
  the runner's own hard limit. Raising it needs CAP_SYS_RESOURCE (a root runner has it); a
  runner without it is refused with the reason, never silently left lower.

A pool host running several runner workers gives each its own ``RUNNER_DEVICES``: a worker
only ever hands out what it declares. ``DevicePool.grant(per_worker)`` gives a launched
server exactly ``accelerators_per_worker`` devices for each engine worker of the config's
topology, taken in declared order, and refuses a topology that needs more than the pool
declares. The grant becomes bubblewrap arguments (``--dev-bind`` of exactly those nodes,
read-only ``/sys`` and ``/proc/driver`` with only the granted GPUs listed, a sized
``/dev/shm``, the memlock limit) or Podman's (``--device``, ``--shm-size``, ``--ulimit``).
"""

from __future__ import annotations

import json
import os
import re
import resource
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runner.launchers.base import LauncherError

ENV_DEVICES = "RUNNER_DEVICES"
ENV_SHARED = "RUNNER_SHARED_DEVICES"
ENV_SHM = "RUNNER_SHM_SIZE"
ENV_MEMLOCK = "RUNNER_MEMLOCK"
ENV_CDI_DIRS = "RUNNER_CDI_SPEC_DIRS"
DEFAULT_CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
NVIDIA_SHARED = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
AMD_SHARED = ("/dev/kfd",)
DEFAULT_SHM_BYTES = 2**30
CAP_SYS_RESOURCE = 24
_CDI_NAME = re.compile(r"^([a-z0-9][a-z0-9.-]*\.[a-z]+/[a-z0-9][a-z0-9_.-]*)=([A-Za-z0-9_.:-]+)$")
_NVIDIA_NODE = re.compile(r"^/dev/nvidia(\d+)$")
_SIZE = re.compile(r"^(\d+)\s*([kmgt]?)i?b?$")
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}

Node = tuple[str, str]  # (path on the host, path inside the sandbox or container)


def host_memlock() -> int | None:
    """The runner's own hard memlock limit (None: unlimited)."""
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    return None if hard == resource.RLIM_INFINITY else int(hard)


def _may_raise_limits() -> bool:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    match = re.search(r"^CapEff:\s*([0-9a-f]+)", status, re.MULTILINE)
    return bool(match and int(match.group(1), 16) >> CAP_SYS_RESOURCE & 1)


def parse_size(name: str, raw: str, *, unlimited: bool = False) -> int | None:
    """``16g``, ``512m``, ``1048576`` → bytes; ``unlimited`` → None where allowed."""
    text = raw.strip().lower()
    if unlimited and text in ("unlimited", "-1"):
        return None
    match = _SIZE.match(text)
    if not match or int(match.group(1)) == 0:
        allowed = "a size such as 16g, 512m or bytes" + (", or unlimited" if unlimited else "")
        raise LauncherError(f"{name}={raw!r} on the runner host is not {allowed}")
    return int(match.group(1)) * _UNITS[match.group(2)]


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One declared accelerator: its entry as written, its vendor, its nodes."""

    entry: str
    vendor: str  # "nvidia", "amd" or "other"
    nodes: tuple[Node, ...] = ()
    cdi: str | None = None  # the CDI name, when declared by CDI
    minor: int | None = None  # NVIDIA device minor (/dev/nvidiaN): what NVML and /proc list
    shared: tuple[Node, ...] = ()  # nodes its CDI spec gives every device of its kind

    def describe(self) -> dict[str, Any]:
        return {
            "entry": self.entry,
            "vendor": self.vendor,
            "nodes": [inside for _, inside in self.nodes],
            "cdi": self.cdi,
            "minor": self.minor,
        }


def _vendor(path: str) -> str:
    if path.startswith("/dev/nvidia"):
        return "nvidia"
    if path.startswith("/dev/dri/") or path == "/dev/kfd":
        return "amd"
    return "other"


def _minor(nodes: Sequence[Node]) -> int | None:
    for _, inside in nodes:
        match = _NVIDIA_NODE.match(inside)
        if match:
            return int(match.group(1))
    return None


def _cdi_specs(dirs: Sequence[str]) -> list[dict[str, Any]]:
    specs = []
    for folder in dirs:
        base = Path(folder)
        if not base.is_dir():
            continue
        for path in sorted(base.iterdir()):
            if path.suffix not in (".yaml", ".yml", ".json"):
                continue
            try:
                text = path.read_text()
                doc = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
            except (OSError, ValueError, yaml.YAMLError) as exc:
                raise LauncherError(f"CDI spec {path} is unreadable: {exc}") from exc
            if isinstance(doc, dict):
                specs.append(doc)
    return specs


def _edit_nodes(edits: Any) -> tuple[Node, ...]:
    nodes = []
    for node in (edits or {}).get("deviceNodes") or []:
        inside = str(node.get("path") or "")
        if inside:
            nodes.append((str(node.get("hostPath") or inside), inside))
    return tuple(nodes)


def resolve_cdi(name: str, dirs: Sequence[str]) -> Accelerator:
    """A CDI name (``vendor.com/class=device``) with the nodes its spec lists: the device's
    own ``containerEdits.deviceNodes`` and the spec-wide ones (control nodes)."""
    match = _CDI_NAME.match(name)
    if not match:
        raise LauncherError(f"{ENV_DEVICES} entry {name!r} is not a CDI name (vendor.com/class=N)")
    kind, device = match.groups()
    vendor = (
        "nvidia"
        if kind.startswith("nvidia.com/")
        else "amd"
        if kind.startswith("amd.com/")
        else "other"
    )
    for spec in _cdi_specs(dirs):
        if spec.get("kind") != kind:
            continue
        for entry in spec.get("devices") or []:
            if str(entry.get("name")) == device:
                own = _edit_nodes(entry.get("containerEdits"))
                return Accelerator(
                    entry=name,
                    vendor=vendor,
                    nodes=own,
                    cdi=name,
                    minor=_minor(own),
                    shared=_edit_nodes(spec.get("containerEdits")),
                )
    return Accelerator(entry=name, vendor=vendor, cdi=name)


def parse_entry(entry: str, cdi_dirs: Sequence[str]) -> Accelerator:
    entry = entry.strip()
    if entry.startswith("/"):
        paths = [p.strip() for p in entry.split("+") if p.strip()]
        for path in paths:
            if not path.startswith("/dev/"):
                raise LauncherError(
                    f"{ENV_DEVICES} entry {entry!r}: {path!r} is not a device node under /dev"
                )
        nodes = tuple((p, p) for p in paths)
        return Accelerator(entry=entry, vendor=_vendor(paths[0]), nodes=nodes, minor=_minor(nodes))
    return resolve_cdi(entry, cdi_dirs)


def _nvidia_gpu_dirs(proc_driver: str) -> dict[int, str]:
    """``/proc/driver/nvidia/gpus/<bus id>`` by device minor (its ``information`` file)."""
    gpus = Path(proc_driver) / "nvidia" / "gpus"
    out: dict[int, str] = {}
    if not gpus.is_dir():
        return out
    for folder in sorted(gpus.iterdir()):
        try:
            text = (folder / "information").read_text()
        except OSError:
            continue
        match = re.search(r"^Device Minor:\s*(\d+)", text, re.MULTILINE)
        if match:
            out[int(match.group(1))] = folder.name
    return out


@dataclass(frozen=True, slots=True)
class DeviceGrant:
    """The devices one launched server is given: one group per engine worker."""

    workers: tuple[tuple[Accelerator, ...], ...]
    shared: tuple[Node, ...]
    shm_bytes: int
    memlock_bytes: int | None  # None: unlimited
    proc_driver: str = "/proc/driver"
    sys_path: str = "/sys"

    @property
    def accelerators(self) -> list[Accelerator]:
        return [acc for group in self.workers for acc in group]

    def nodes(self) -> list[Node]:
        """Every node bound in: the accelerators' own, then the shared ones, each once."""
        seen: dict[str, Node] = {}
        for acc in self.accelerators:
            for node in acc.nodes:
                seen.setdefault(node[1], node)
        for acc in self.accelerators:
            for node in acc.shared:
                seen.setdefault(node[1], node)
        if self.accelerators:
            for node in self.shared:
                seen.setdefault(node[1], node)
        return list(seen.values())

    def minors(self) -> list[int]:
        return [acc.minor for acc in self.accelerators if acc.minor is not None]

    def memlock_preflight(self) -> None:
        """Refuse a memlock limit above the runner's own that it may not raise."""
        hard = host_memlock()
        wanted = self.memlock_bytes
        above = hard is not None and (wanted is None or wanted > hard)
        if above and not _may_raise_limits():
            raise LauncherError(
                f"{ENV_MEMLOCK}: the pool's memlock limit "
                f"({'unlimited' if wanted is None else wanted}) is above this runner's hard "
                f"limit ({hard} bytes) and the runner lacks CAP_SYS_RESOURCE to raise it"
            )

    def memlock_arg(self) -> str:
        """``soft:hard`` for ``prlimit --memlock=`` and Podman's ``--ulimit memlock=``."""
        value = "-1" if self.memlock_bytes is None else str(self.memlock_bytes)
        return f"{value}:{value}"

    def bwrap_args(self) -> list[str]:
        """bubblewrap arguments after ``--dev /dev``: exactly the granted nodes, a sized
        ``/dev/shm``; with accelerators, ``/sys`` and ``/proc/driver`` read-only, and of
        ``/proc/driver/nvidia/gpus`` only the granted GPUs; without, only the CPU and NUMA
        topology of ``/sys``."""
        args = ["--size", str(self.shm_bytes), "--perms", "1777", "--tmpfs", "/dev/shm"]
        for acc in self.accelerators:
            if acc.cdi is not None and not acc.nodes:
                raise LauncherError(
                    f"CDI device {acc.cdi!r} is in no CDI spec under "
                    f"{os.environ.get(ENV_CDI_DIRS) or ':'.join(DEFAULT_CDI_DIRS)}; the "
                    "sandbox needs its device nodes"
                )
        for host, inside in self.nodes():
            if not os.path.exists(host):
                raise LauncherError(
                    f"device {host} declared by the pool does not exist on the host"
                )
            args += ["--dev-bind", host, inside]
        if not self.accelerators:
            # a CPU server still reads the CPU and NUMA topology (vLLM's CPU worker runs
            # `lscpu` to pick its threads): those two folders only, read-only
            for parent in ("/sys", "/sys/devices", "/sys/devices/system"):
                args += ["--perms", "0755", "--dir", parent]
            for topology in ("devices/system/cpu", "devices/system/node"):
                args += ["--ro-bind-try", f"{self.sys_path}/{topology}", f"/sys/{topology}"]
            return args
        if os.path.isdir(self.sys_path):
            args += ["--ro-bind", self.sys_path, "/sys"]
        if os.path.isdir(self.proc_driver):
            args += ["--ro-bind", self.proc_driver, "/proc/driver"]
            gpus = _nvidia_gpu_dirs(self.proc_driver)
            if gpus:
                base = "/proc/driver/nvidia/gpus"
                args += ["--tmpfs", base]
                for minor in self.minors():
                    if minor in gpus:
                        src = f"{self.proc_driver}/nvidia/gpus/{gpus[minor]}"
                        args += ["--ro-bind", src, f"{base}/{gpus[minor]}"]
                args += ["--remount-ro", base]
        return args

    def podman_devices(self) -> list[str]:
        """Podman ``--device`` values: CDI names as declared, nodes as ``host:inside``."""
        out: list[str] = []
        for acc in self.accelerators:
            if acc.cdi is not None:
                out.append(acc.cdi)
            else:
                out += [f"{host}:{inside}" for host, inside in acc.nodes]
        if any(acc.cdi is None for acc in self.accelerators):
            out += [f"{host}:{inside}" for host, inside in self.shared]
        return out

    def visible_env(self) -> dict[str, str]:
        """``NVIDIA_VISIBLE_DEVICES`` for the container: the granted GPUs by minor (or CDI
        device), ``void`` when none. An image's own ``NVIDIA_VISIBLE_DEVICES=all`` (vLLM's and
        most CUDA images set it) would make a legacy nvidia hook on the node inject every GPU;
        this value overrides the image's, so the hook, where there is one, adds exactly the
        grant."""
        names: list[str] = []
        for acc in self.accelerators:
            if acc.vendor != "nvidia":
                continue
            if acc.minor is not None:
                names.append(str(acc.minor))
            elif acc.cdi is not None:
                names.append(acc.cdi.partition("=")[2])
        return {"NVIDIA_VISIBLE_DEVICES": ",".join(names) or "void"}

    def podman_args(self) -> list[str]:
        args: list[str] = []
        for device in self.podman_devices():
            args += ["--device", device]
        return [*args, f"--shm-size={self.shm_bytes}b", "--ulimit", f"memlock={self.memlock_arg()}"]

    def describe(self) -> dict[str, Any]:
        """What the runner reports about the grant (the launcher's endpoint info)."""
        return {
            "workers": [[acc.describe() for acc in group] for group in self.workers],
            "shared": [inside for _, inside in self.shared] if self.accelerators else [],
            "shm_bytes": self.shm_bytes,
            "memlock_bytes": self.memlock_bytes,
        }


@dataclass(frozen=True, slots=True)
class DevicePool:
    """What the pool host declares (``from_env``)."""

    accelerators: tuple[Accelerator, ...] = ()
    shared: tuple[Node, ...] = ()
    shm_bytes: int = DEFAULT_SHM_BYTES
    memlock_bytes: int | None = field(default_factory=host_memlock)
    proc_driver: str = "/proc/driver"
    sys_path: str = "/sys"
    cdi_dirs: tuple[str, ...] = field(default=DEFAULT_CDI_DIRS)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DevicePool:
        env = os.environ if environ is None else environ
        cdi_dirs = tuple(
            d for d in (env.get(ENV_CDI_DIRS) or ":".join(DEFAULT_CDI_DIRS)).split(":") if d
        )
        entries = [e for e in (env.get(ENV_DEVICES) or "").split(",") if e.strip()]
        accelerators = tuple(parse_entry(e, cdi_dirs) for e in entries)
        seen = [inside for acc in accelerators for _, inside in acc.nodes] + [
            acc.cdi for acc in accelerators if acc.cdi and not acc.nodes
        ]
        duplicate = sorted({n for n in seen if seen.count(n) > 1 and n is not None})
        if duplicate:
            raise LauncherError(f"{ENV_DEVICES} names {duplicate} more than once")
        raw_shared = env.get(ENV_SHARED)
        if raw_shared is not None:
            shared = tuple((p.strip(), p.strip()) for p in raw_shared.split(",") if p.strip())
        else:
            vendors = {acc.vendor for acc in accelerators if acc.cdi is None}
            defaults = (NVIDIA_SHARED if "nvidia" in vendors else ()) + (
                AMD_SHARED if "amd" in vendors else ()
            )
            shared = tuple((p, p) for p in defaults if os.path.exists(p))
        shm = env.get(ENV_SHM)
        memlock = env.get(ENV_MEMLOCK)
        return cls(
            accelerators=accelerators,
            shared=shared,
            shm_bytes=DEFAULT_SHM_BYTES if not shm else parse_size(ENV_SHM, shm) or 0,
            memlock_bytes=(
                parse_size(ENV_MEMLOCK, memlock, unlimited=True)
                if memlock
                else (None if accelerators else host_memlock())
            ),
            cdi_dirs=cdi_dirs,
        )

    def grant(self, per_worker: Sequence[int]) -> DeviceGrant:
        """``per_worker[i]`` accelerators for engine worker i, in declared order. A pool that
        declares none gives none (a CPU host); one that declares fewer than asked refuses."""
        needed = sum(per_worker)
        groups: list[tuple[Accelerator, ...]] = []
        if self.accelerators:
            if needed > len(self.accelerators):
                raise LauncherError(
                    f"the config's topology needs {needed} accelerators "
                    f"({' + '.join(str(n) for n in per_worker)} per worker); this runner "
                    f"worker declares {len(self.accelerators)} in {ENV_DEVICES}"
                )
            at = 0
            for count in per_worker:
                groups.append(self.accelerators[at : at + count])
                at += count
        return DeviceGrant(
            workers=tuple(groups),
            shared=self.shared,
            shm_bytes=self.shm_bytes,
            memlock_bytes=self.memlock_bytes,
            proc_driver=self.proc_driver,
            sys_path=self.sys_path,
        )
