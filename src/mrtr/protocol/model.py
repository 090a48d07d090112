"""The base of every protocol type: camelCase on the wire, snake_case in Python, unknown
fields kept (`extra="allow"`) so a message from a newer peer survives a decode/encode round
trip, and `to_wire()` dropping unset optional fields instead of sending nulls."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class McpModel(BaseModel):
    """Base of every protocol type: camelCase aliases, extra fields kept."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="allow",
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON object for this value, as sent on the wire."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


Meta = Annotated[dict[str, Any] | None, Field(alias="_meta")]


__all__ = ["McpModel", "Meta"]
