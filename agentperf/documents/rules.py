"""The contract's rules (docs/pipeline.md "The contract"): strict models that refuse
unknown fields and coerce nothing, the engine models' complete form, and the number and
digest types every document uses."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticUndefined

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Count = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(ge=1)]


class Contract(BaseModel):
    """Strict: unknown fields refused, no coercion (docs/pipeline.md "The contract")."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True)

    def dump(self) -> dict[str, Any]:
        """The JSON document stored and sent: the fields that were given, as given (a
        default the writer did not set is not written)."""
        return self.model_dump(mode="json", exclude_unset=True)


class Complete(Contract):
    """The contract's form of an engine model (agentperf/engine/): its fields, declared once in
    the engine, each required here (the engine's defaults are for building one, not for
    reading a document), under the contract's rules."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        for info in cls.model_fields.values():
            info.default = PydanticUndefined
            info.default_factory = None
        cls.model_rebuild(force=True)
