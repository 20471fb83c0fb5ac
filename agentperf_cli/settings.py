"""Where the CLI finds the API and its token: flags, then `AGENTPERF_URL` /
`AGENTPERF_TOKEN`, then the file `agentperf login` writes (`AGENTPERF_CONFIG`, else
`$XDG_CONFIG_HOME/agentperf/config.json`, else `~/.config/agentperf/config.json`), 0600."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"


class CliError(Exception):
    """A problem the CLI reports as one line and an exit code (never a traceback)."""

    def __init__(self, message: str, *, exit_code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def config_path() -> Path:
    explicit = os.environ.get("AGENTPERF_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "agentperf" / "config.json"


def read_config() -> dict[str, Any]:
    path = config_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError:
        raise CliError(f"{path} is not valid JSON; run `agentperf login` again") from None
    return data if isinstance(data, dict) else {}


def write_config(url: str, token: str) -> Path:
    """Write the config file with 0600 permissions (its folder 0700), replacing it."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask or an older file said
        with os.fdopen(fd, "w") as handle:
            json.dump({"url": url, "token": token}, handle, indent=2)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


@dataclass(frozen=True)
class Target:
    url: str
    token: str | None


def normalize_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise CliError(f"the API URL must start with http:// or https:// (got {url!r})")
    return url


def resolve(url: str | None = None) -> Target:
    """The API base URL and token: the flag, then the environment, then the config file."""
    stored = read_config()
    chosen = url or os.environ.get("AGENTPERF_URL") or stored.get("url") or DEFAULT_URL
    token = os.environ.get("AGENTPERF_TOKEN") or stored.get("token") or None
    return Target(url=normalize_url(str(chosen)), token=str(token) if token else None)
