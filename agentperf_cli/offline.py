"""`agentperf validate`: the API's own parser and validator (`submissions.schema`), run
here with no server and no database, so the same field paths come out.

`load_document` reads one setting, `MAX_CONFIG_BYTES`; the CLI configures Django's
settings with just that (from the same environment variable as config/settings.py), so
nothing of the web app is loaded. The catalog checks (the model and hardware slugs, an
attached endpoint's allowlist) need the server's database and run only on submit."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# config/settings.py: MAX_CONFIG_BYTES = env_int("MAX_CONFIG_BYTES", 256 * 1024)
DEFAULT_MAX_CONFIG_BYTES = 256 * 1024


def content_type_for(path: Path) -> str:
    """The media type the CLI sends a config file as (the API sniffs the rest)."""
    suffix = path.suffix.lower()
    if suffix == ".json":
        return "application/json"
    if suffix in (".yaml", ".yml"):
        return "application/yaml"
    return ""


def _configure() -> None:
    from django.conf import settings

    if not settings.configured:
        raw = os.environ.get("MAX_CONFIG_BYTES", "")
        limit = int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_MAX_CONFIG_BYTES
        settings.configure(MAX_CONFIG_BYTES=limit)


def validate_text(text: bytes, content_type: str) -> tuple[dict[str, Any] | None, Any]:
    """(the API's error body, None) for a refused config; (None, DeploymentConfig) else."""
    _configure()
    from submissions.schema import ConfigError, load_document, validate_config

    try:
        config = validate_config(load_document(text, content_type))
    except ConfigError as exc:
        # The body the API answers (vendor/api/views.py config_api_error).
        error = {"code": exc.code, "message": exc.message, "fields": exc.fields}
        return {"error": error}, None
    return None, config
