"""`agentperf validate`: the API's own parser and validator (`agentperf.schema`, the DB-free
schema that the web side's `submissions.schema` wraps with its size limit), run here with no
server, no database and no Django, so the same field paths come out.

The size limit is the API's MAX_CONFIG_BYTES, read from the same environment variable as
config/settings.py (same default). The catalog checks (the model and hardware slugs, an
attached endpoint's allowlist) need the server's database and run only on submit."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# config/settings.py: MAX_CONFIG_BYTES = env_int("MAX_CONFIG_BYTES", 256 * 1024)
from agentperf.schema.loading import DEFAULT_MAX_CONFIG_BYTES


def content_type_for(path: Path) -> str:
    """The media type the CLI sends a config file as: JSON by its extension, else YAML (the
    YAML reader reads JSON too); the API never guesses at an undeclared body (a 415)."""
    return "application/json" if path.suffix.lower() == ".json" else "application/yaml"


def max_config_bytes() -> int:
    """The API's MAX_CONFIG_BYTES: the environment variable, else the default."""
    raw = os.environ.get("MAX_CONFIG_BYTES", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_MAX_CONFIG_BYTES


def validate_text(text: bytes, content_type: str) -> tuple[dict[str, Any] | None, Any]:
    """(the API's error body, None) for a refused config; (None, DeploymentConfig) else."""
    from agentperf.schema import ConfigError, load_document, validate_config

    try:
        config = validate_config(load_document(text, content_type, limit=max_config_bytes()))
    except ConfigError as exc:
        # The body the API answers (portal/api/views.py config_api_error).
        error = {"code": exc.code, "message": exc.message, "fields": exc.fields}
        return {"error": error}, None
    return None, config
