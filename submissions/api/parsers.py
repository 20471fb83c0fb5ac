"""Config bodies arrive as raw YAML or JSON; the schema module parses them, not DRF."""

from __future__ import annotations

from django.conf import settings
from rest_framework import parsers

from config.api_errors import ApiError


class RawConfigParser(parsers.BaseParser):
    """Hands the undecoded body to the view (size-checked), so idempotency can hash it."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None) -> bytes:
        limit = int(settings.MAX_CONFIG_BYTES)
        data = stream.read(limit + 1) if stream is not None else b""
        if len(data) > limit:
            raise ApiError(
                "too_large",
                f"the config is larger than {limit} bytes",
                status_code=413,
                fields={"non_field_errors": [f"larger than {limit} bytes"]},
            )
        return data
