"""The deployment-config schema (docs/api.md "The config, in short"), DB-free: the schema
(`agentperf.schema.deployment`, its building blocks `fields` and its `launchers` section),
the document reader (`loading`), the secret detector (`secrets`, its name rules
`secret_names`), the input limits (`limits`) and the one YAML reader (`yaml12`). The web
side (`submissions.schema`, which passes the MAX_CONFIG_BYTES setting), the vendor CLI's
offline `agentperf validate` and the engine's own distribution (packages/agentperf,
docs/engine.md "Install") all read it; it imports no Django and no web app
(pyproject.toml import-linter contracts)."""

from agentperf.schema.deployment import (
    SCHEMA_VERSION,
    DeploymentConfig,
    config_json_schema,
    parse_config,
    validate_config,
)
from agentperf.schema.loading import DEFAULT_MAX_CONFIG_BYTES, ConfigError, load_document

__all__ = [
    "DEFAULT_MAX_CONFIG_BYTES",
    "SCHEMA_VERSION",
    "ConfigError",
    "DeploymentConfig",
    "config_json_schema",
    "load_document",
    "parse_config",
    "validate_config",
]
