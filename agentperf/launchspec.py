"""What a deployment config says about its launch that both sides read: the image policy
(which registries a pool pulls from, and why a reference may not be pulled: the web side asks
at submit, the container launcher before it pulls; docs/security.md "Container launcher") and
the run spec's `slurm` section (built at dispatch, and by `python -m runner.launchers.slurm
render` outside the platform; docs/pipeline.md "Slurm")."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class Registry:
    host: str  # host[:port], as in an image reference
    plain_http: bool  # an `http://` entry: no TLS (a loopback registry)


def allowed_registries(raw: str | None = None) -> list[Registry]:
    """`RUNNER_REGISTRIES`: comma-separated `host[:port]` (`http://host:port` for a registry
    without TLS, e.g. on loopback). None set: no image may be pulled."""
    out: list[Registry] = []
    text = os.environ.get("RUNNER_REGISTRIES", "") if raw is None else raw
    for item in text.split(","):
        item = item.strip().rstrip("/")
        if not item:
            continue
        plain = item.startswith("http://")
        host = item.removeprefix("http://").removeprefix("https://")
        out.append(Registry(host=host, plain_http=plain))
    return out


def image_problem(reference: str, registries: list[Registry]) -> str | None:
    """Why `reference` may not be pulled here (not pinned by digest, no registry host, a
    registry not allowed), or None. The web side asks the same question at submit."""
    name, sep, digest = reference.partition("@")
    if not sep:
        return (
            f"{reference!r} is not pinned by digest (name@sha256:<64 hex>); a tag names "
            "whatever the registry holds today, so it is never pulled"
        )
    if not DIGEST.match(digest):
        return f"{digest!r} is not a sha256 digest"
    first, slash, _ = name.partition("/")
    if not slash or not ("." in first or ":" in first or first == "localhost"):
        return f"{reference!r} names no registry host; write registry.example/name@sha256:<64 hex>"
    if not any(registry.host == first for registry in registries):
        allowed = ", ".join(r.host for r in registries) or "none (RUNNER_REGISTRIES is empty)"
        return f"registry {first!r} is not one this pool pulls from; allowed: {allowed}"
    return None


def launcher_section(config: dict[str, Any]) -> dict[str, Any]:
    """The run spec's `slurm` section of a deployment config (what dispatch builds in
    runs/dispatch.py `_slurm_launcher`), for rendering a job outside the platform."""
    spec = (config.get("launcher") or {}).get("slurm") or {}
    role_args = spec.get("role_args") or {}
    env = dict(spec.get("env") or {})
    roles = [
        {
            "name": role["name"],
            "workers": int(role["workers"]),
            "accelerators_per_worker": int(role["accelerators_per_worker"]),
            "command": [*spec["command"], *(role_args.get(role["name"]) or [])],
            "env": env,
        }
        for role in (config.get("topology") or {}).get("roles") or []
    ]
    section: dict[str, Any] = {
        "kind": "slurm",
        "image": (config.get("engine") or {}).get("image"),
        "roles": roles,
        "ready_path": spec.get("ready_path") or "/health",
        "ready_timeout_s": int(spec.get("ready_timeout_s") or 900),
        "time_limit_s": 60 * int(spec.get("time_limit_min") or 240),
        "accelerators_used": sum(r["workers"] * r["accelerators_per_worker"] for r in roles),
        "served_model_name": spec["served_model_name"],
    }
    if spec.get("frontend"):
        section["frontend"] = {
            "command": list(spec["frontend"]["command"]),
            "env": dict(spec["frontend"].get("env") or {}),
        }
    return section
