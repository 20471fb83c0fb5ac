"""Reading settings from the environment, failing loudly on a malformed value.

Every error names the variable, so a bad deployment stops at start-up with a message an
operator can act on (the habit of healthchecks' `envbool`/`envint`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit


class ImproperlyConfiguredEnv(Exception):
    """A variable is set to a value that cannot be used."""

    def __init__(self, name: str, value: str, why: str) -> None:
        shown = value if len(value) <= 80 else value[:77] + "..."
        super().__init__(f"Environment variable {name}={shown!r} is malformed: {why}")
        self.name = name


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfiguredEnv(name, raw, "expected one of true/false/1/0/yes/no/on/off")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfiguredEnv(name, raw, "expected an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfiguredEnv(name, raw, f"must be at least {minimum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    items = [item.strip() for item in raw.split(",")]
    if any(not item for item in items):
        raise ImproperlyConfiguredEnv(name, raw, "empty item in comma-separated list")
    return items


@dataclass(frozen=True, slots=True)
class DatabaseUrl:
    engine: str
    name: str
    user: str
    password: str
    host: str
    port: str
    options: dict[str, str]


_DB_ENGINES = {
    "postgres": "django.db.backends.postgresql",
    "postgresql": "django.db.backends.postgresql",
    "pgsql": "django.db.backends.postgresql",
    "sqlite": "django.db.backends.sqlite3",
}


def parse_database_url(name: str, raw: str) -> DatabaseUrl:
    """Parse `postgresql://user:pass@host:port/db?opt=v` or `sqlite:///path`."""
    try:
        parts = urlsplit(raw)
        port = parts.port  # raises ValueError on a non-numeric port
    except ValueError as exc:
        raise ImproperlyConfiguredEnv(name, raw, str(exc)) from None
    scheme = parts.scheme.split("+")[0]
    if scheme not in _DB_ENGINES:
        raise ImproperlyConfiguredEnv(
            name, raw, f"unknown scheme {parts.scheme!r}; use postgresql:// or sqlite:///"
        )
    engine = _DB_ENGINES[scheme]
    path = unquote(parts.path)
    if engine.endswith("sqlite3"):
        db_name = path[1:] if path.startswith("//") else path
        db_name = db_name or ""
        if not db_name:
            raise ImproperlyConfiguredEnv(name, raw, "sqlite URL needs a file path")
        return DatabaseUrl(engine, db_name, "", "", "", "", {})
    db_name = path.lstrip("/")
    if not db_name:
        raise ImproperlyConfiguredEnv(name, raw, "missing database name after the host")
    if not parts.hostname:
        raise ImproperlyConfiguredEnv(name, raw, "missing host")
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    return DatabaseUrl(
        engine,
        db_name,
        unquote(parts.username or ""),
        unquote(parts.password or ""),
        parts.hostname,
        str(port or ""),
        options,
    )


_BROKER_SCHEMES = ("amqp", "amqps", "pyamqp", "redis", "rediss", "sqla+sqlite", "memory")


def check_broker_url(name: str, raw: str) -> str:
    scheme = raw.split("://", 1)[0] if "://" in raw else ""
    if scheme not in _BROKER_SCHEMES:
        raise ImproperlyConfiguredEnv(
            name, raw, f"scheme must be one of {', '.join(_BROKER_SCHEMES)}"
        )
    if scheme not in ("memory",) and not raw.split("://", 1)[1]:
        raise ImproperlyConfiguredEnv(name, raw, "missing host or path")
    return raw


def check_http_url(name: str, raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ImproperlyConfiguredEnv(name, raw, "expected an http(s):// URL with a host")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError as exc:
        raise ImproperlyConfiguredEnv(name, raw, str(exc)) from None
    return raw


def check_redis_url(name: str, raw: str) -> str:
    """A redis:// (or rediss://, unix://) URL with a host, or a loud failure."""
    parts = urlsplit(raw)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ImproperlyConfiguredEnv(name, raw, "expected a redis://, rediss:// or unix:// URL")
    if parts.scheme != "unix" and not parts.hostname:
        raise ImproperlyConfiguredEnv(name, raw, "missing host")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError as exc:
        raise ImproperlyConfiguredEnv(name, raw, str(exc)) from None
    return raw
