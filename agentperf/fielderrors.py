"""One field-error map for every refusal the platform gives, in the API, the CLI and the
portal (docs/api.md "Errors"): ``{"path.to.field": ["message", ...]}``.

- A path is the field's keys and list indices joined by dots, as the document nests them:
  ``rungs.1.patch.speculative.draft_tokens``, ``topology.roles.0.accelerators``.
- An error that belongs to no one field is under ``non_field_errors`` (:data:`NON_FIELD`).
- A pydantic refusal reads the same whoever raised it: an unknown key is "unknown field",
  a missing one "required field missing", a validator's message without pydantic's
  "Value error, " prefix (:func:`validation_fields`).
- A cross-field check names the field it is about itself: a ``PydanticCustomError`` of type
  ``config_field`` (:data:`CROSS_FIELD`) with ``path`` (dotted, below the error's location)
  and ``message`` in its context is placed at that field with that message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import ValidationError

NON_FIELD = "non_field_errors"
CROSS_FIELD = "config_field"


def field_path(loc: Iterable[Any]) -> str:
    """The dotted path of a location (keys and indices); NON_FIELD for the document itself."""
    return ".".join(str(part) for part in loc) or NON_FIELD


def message(err: Any) -> str:
    """One pydantic error's message, worded as the platform words it."""
    if err["type"] == CROSS_FIELD:
        return str((err.get("ctx") or {}).get("message", err["msg"]))
    if err["type"] == "extra_forbidden":
        return "unknown field"
    if err["type"] == "missing":
        return "required field missing"
    return str(err["msg"]).removeprefix("Value error, ")


def validation_fields(
    exc: ValidationError,
    *,
    location: Callable[[Sequence[Any], Any], Sequence[Any]] | None = None,
) -> dict[str, list[str]]:
    """A pydantic ValidationError as the field map. ``location(loc, err)`` may rewrite an
    error's location first (drop a discriminator's tag, follow a nested path)."""
    out: dict[str, list[str]] = {}
    for err in exc.errors(include_url=False, include_input=False):
        loc = list(err["loc"])
        if err["type"] == CROSS_FIELD:
            loc += [p for p in str((err.get("ctx") or {}).get("path", "")).split(".") if p]
        if location is not None:
            loc = list(location(loc, err))
        out.setdefault(field_path(loc), []).append(message(err))
    return out
