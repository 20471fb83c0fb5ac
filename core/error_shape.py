"""The API's one error shape (docs/api.md "Errors"), a plain dict, importing nothing:

{"error": {"code": "...", "message": "...", "fields": {"path.to.field": ["..."]}}}

`core.api_errors` maps exceptions onto it; middleware and error views that answer before
DRF (`core.contention`, `core.middleware`, `core.views`) build it here directly.
"""

from __future__ import annotations


def error_body(code: str, message: str, fields: dict[str, list[str]] | None = None) -> dict:
    return {"error": {"code": code, "message": message, "fields": fields or {}}}
