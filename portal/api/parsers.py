"""Config bodies arrive as raw YAML or JSON; the schema module parses them, not DRF."""

from __future__ import annotations

from django.conf import settings
from rest_framework import parsers

from core.parsers import read_capped


class RawConfigParser(parsers.BaseParser):
    """Hands the undecoded body to the view (size-checked), so idempotency can hash it."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None) -> bytes:
        return read_capped(stream, limit=int(settings.MAX_CONFIG_BYTES), what="the config")
