"""Reading a config document from untrusted text (docs/security.md "YAML", "Input
limits"): at most the size limit, UTF-8, of a declared media type, JSON or YAML through the
platform's one YAML reader, depth and values checked, a mapping at the top level. What
fails is a :class:`ConfigError` whose ``fields`` map the dotted path to fix to messages."""

from __future__ import annotations

import json
from typing import Any

import yaml

from agentperf.fielderrors import NON_FIELD


class ConfigError(ValueError):
    """A config that cannot be accepted. `fields` maps dotted paths to messages."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "invalid_config",
        fields: dict[str, list[str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fields: dict[str, list[str]] = fields or {}

    def __str__(self) -> str:
        detail = "; ".join(f"{k}: {' '.join(v)}" for k, v in self.fields.items())
        return f"{self.message} {detail}".strip()


JSON_TYPES = ("application/json",)
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
# Declared text of either syntax: YAML is a superset of JSON, so the YAML reader serves both.
# A body with no Content-Type (or application/octet-stream, which says nothing more) is a
# 415: it is never guessed at (docs/security.md "YAML").
SNIFF_TYPES = ("text/plain",)
ACCEPTED_TYPES = JSON_TYPES + YAML_TYPES + SNIFF_TYPES


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _media_type(content_type: str) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


# The size limit's default; the web side passes its MAX_CONFIG_BYTES setting (config/settings.py,
# the same default) and the CLI the same environment variable (agentperf_cli/offline.py).
DEFAULT_MAX_CONFIG_BYTES = 256 * 1024


def load_document(
    text: str | bytes, content_type: str = "", *, limit: int = DEFAULT_MAX_CONFIG_BYTES
) -> Any:
    """The data in `text` (JSON or YAML), at most `limit` bytes; ConfigError when unreadable."""
    raw = text.encode() if isinstance(text, str) else text
    if len(raw) > limit:
        raise ConfigError(
            f"the config is {len(raw)} bytes; the limit is {limit}",
            code="too_large",
            fields={NON_FIELD: [f"larger than {limit} bytes"]},
        )
    try:
        body = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            "the config is not UTF-8", code="unparseable", fields={NON_FIELD: [str(exc)]}
        ) from None
    media = _media_type(content_type)
    if media not in ACCEPTED_TYPES:
        raise ConfigError(
            f"unsupported content type {media!r}; send JSON or YAML"
            if media
            else "no Content-Type was declared; send application/json or application/yaml",
            code="unsupported_media_type",
            fields={NON_FIELD: [f"accepted: {', '.join(ACCEPTED_TYPES)}"]},
        )
    if not body.strip():
        raise ConfigError("the config is empty", code="unparseable", fields={NON_FIELD: ["empty"]})
    from agentperf.schema import limits  # depth first: the readers below recurse
    from agentperf.schema.yaml12 import load_yaml  # the one YAML reader (docs/security.md "YAML")

    try:
        if media in JSON_TYPES:
            limits.check_json_depth(body)
            # non-finite constants are kept here and refused by path in check_values
            data = json.loads(body, object_pairs_hook=_json_pairs, parse_constant=float)
        else:
            data = load_yaml(body)  # YAML 1.2 core; depth, anchors, tags, keys checked
        limits.check_values(data, code="invalid_config")
    except limits.LimitError as exc:
        raise ConfigError(exc.message, code=exc.code, fields=exc.fields) from None
    except (ValueError, yaml.YAMLError) as exc:
        kind = "JSON" if media in JSON_TYPES else "YAML"
        raise ConfigError(
            f"the config is not valid {kind}",
            code="unparseable",
            fields={NON_FIELD: [" ".join(str(exc).split())]},
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            "the config must be a mapping at the top level",
            code="invalid_config",
            fields={NON_FIELD: [f"got {type(data).__name__}"]},
        )
    return data
