"""The deployment-config schema as the web side uses it: `agentperf.schema` (DB-free, shared
with the CLI and the agentperf distribution), with the size limit taken from the
MAX_CONFIG_BYTES setting (config/settings.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from agentperf.schema.deployment import (
    SCHEMA_VERSION,
    DeploymentConfig,
    config_json_schema,
    validate_config,
)
from agentperf.schema.deployment import parse_config as _parse_config
from agentperf.schema.loading import ConfigError
from agentperf.schema.loading import load_document as _load_document


def load_document(text: str | bytes, content_type: str = "") -> Any:
    """`agentperf.schema.load_document` under the MAX_CONFIG_BYTES setting."""
    return _load_document(text, content_type, limit=int(settings.MAX_CONFIG_BYTES))


def parse_config(text: str | bytes, content_type: str = "") -> DeploymentConfig:
    """`agentperf.schema.parse_config` under the MAX_CONFIG_BYTES setting."""
    return _parse_config(text, content_type, limit=int(settings.MAX_CONFIG_BYTES))


__all__ = [
    "SCHEMA_VERSION",
    "ConfigError",
    "DeploymentConfig",
    "config_json_schema",
    "load_document",
    "parse_config",
    "validate_config",
]
