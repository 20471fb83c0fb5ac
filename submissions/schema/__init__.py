"""The deployment-config schema; see `submissions.schema.deployment`."""

from submissions.schema.deployment import (
    SCHEMA_VERSION,
    ConfigError,
    DeploymentConfig,
    config_json_schema,
    load_document,
    parse_config,
    validate_config,
)

__all__ = [
    "SCHEMA_VERSION",
    "ConfigError",
    "DeploymentConfig",
    "config_json_schema",
    "load_document",
    "parse_config",
    "validate_config",
]
