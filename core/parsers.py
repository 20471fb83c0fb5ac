"""DRF's JSON parser with the project's input limits (docs/security.md "Input limits").

Every JSON body the API accepts (vendor, review, runner) is size-capped, depth-checked
before `json.loads` recurses, and refused by field path when it holds a non-finite number
or a control character: a 400/413 in the one error shape, never a 5xx.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import parsers

from agentperf.schema.limits import LimitError, load_json


def read_capped(stream: Any, *, limit: int, what: str = "the body") -> bytes:
    """At most `limit` bytes of a request body; a 413 in the error shape beyond that."""
    from core.api_errors import ApiError

    raw = stream.read(limit + 1) if stream is not None else b""
    if len(raw) > limit:
        raise ApiError(
            "too_large",
            f"{what} is larger than {limit} bytes",
            status_code=413,
            fields={"non_field_errors": [f"larger than {limit} bytes"]},
        )
    return bytes(raw)


class JSONParser(parsers.JSONParser):
    """`application/json` bodies, limited (the default parser of every API view)."""

    # Runner API bodies carry model output (canary answers, top-k tokens), where control
    # characters are data: only NUL is refused there (RunnerJSONParser).
    measured_text = False

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        # imported here: DRF imports this module while it defines APIView, and this one
        # imports DRF's views
        from core.api_errors import ApiError

        raw = read_capped(stream, limit=int(settings.MAX_JSON_BODY_BYTES))
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = raw.decode(encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise ApiError(
                "parse_error", "the body is not valid text", fields={"non_field_errors": [str(exc)]}
            ) from None
        try:
            return load_json(text, measured_text=self.measured_text)
        except LimitError as exc:
            raise ApiError(exc.code, exc.message, fields=exc.fields) from None
        except ValueError as exc:
            raise ApiError(
                "parse_error",
                "the body is not valid JSON",
                fields={"non_field_errors": [" ".join(str(exc).split())]},
            ) from None


class RunnerJSONParser(JSONParser):
    """The runner API's bodies: the same limits, but any character of measured text."""

    measured_text = True
