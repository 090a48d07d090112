"""Elicitation types: the form fields a `requestedSchema` may hold, the params of
`elicitation/create` (form or URL mode) and the user's answer."""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from .model import McpModel, Meta

# --- elicitation form fields (the properties of `requestedSchema`) -----------------------


class StringSchema(McpModel):
    """A text field."""

    type: Literal["string"] = "string"
    title: str | None = None
    description: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    format: Literal["date", "date-time", "email", "uri"] | None = None
    default: str | None = None


class NumberSchema(McpModel):
    """A number (or integer) field."""

    type: Literal["number", "integer"] = "number"
    title: str | None = None
    description: str | None = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    default: int | float | None = None


class BooleanSchema(McpModel):
    """A yes/no field."""

    type: Literal["boolean"] = "boolean"
    title: str | None = None
    description: str | None = None
    default: bool | None = None


class EnumOption(McpModel):
    """One choice of a titled enum: the value sent back and the label shown."""

    const: str
    title: str


class UntitledSingleSelectEnumSchema(McpModel):
    """Pick one of `enum`."""

    type: Literal["string"] = "string"
    enum: list[str]
    title: str | None = None
    description: str | None = None
    default: str | None = None


class TitledSingleSelectEnumSchema(McpModel):
    """Pick one of `one_of`, each shown by its title."""

    type: Literal["string"] = "string"
    one_of: list[EnumOption]
    title: str | None = None
    description: str | None = None
    default: str | None = None


class UntitledEnumItems(McpModel):
    type: Literal["string"] = "string"
    enum: list[str]


class TitledEnumItems(McpModel):
    any_of: list[EnumOption]


class UntitledMultiSelectEnumSchema(McpModel):
    """Pick several of `items.enum`."""

    type: Literal["array"] = "array"
    items: UntitledEnumItems
    title: str | None = None
    description: str | None = None
    min_items: int | None = None
    max_items: int | None = None
    default: list[str] | None = None


class TitledMultiSelectEnumSchema(McpModel):
    """Pick several of `items.any_of`, each shown by its title."""

    type: Literal["array"] = "array"
    items: TitledEnumItems
    title: str | None = None
    description: str | None = None
    min_items: int | None = None
    max_items: int | None = None
    default: list[str] | None = None


class LegacyTitledEnumSchema(McpModel):
    """Deprecated form of a titled single select (`enum` with parallel `enum_names`)."""

    type: Literal["string"] = "string"
    enum: list[str]
    enum_names: list[str] | None = None
    title: str | None = None
    description: str | None = None
    default: str | None = None


PrimitiveSchemaDefinition = (
    StringSchema
    | NumberSchema
    | BooleanSchema
    | UntitledSingleSelectEnumSchema
    | TitledSingleSelectEnumSchema
    | UntitledMultiSelectEnumSchema
    | TitledMultiSelectEnumSchema
    | LegacyTitledEnumSchema
)


# --- client-side requests carried by MRTR ------------------------------------------------


class ElicitRequestParams(McpModel):
    """`elicitation/create` params: form mode (`requested_schema`) or URL mode (`url`)."""

    message: str
    mode: Literal["form", "url"] | None = None
    requested_schema: dict[str, Any] | None = None
    url: str | None = None
    meta: Meta = None

    @property
    def is_url_mode(self) -> bool:
        """True for URL mode; a missing mode means form mode."""
        return self.mode == "url"


class ElicitRequestFormParams(ElicitRequestParams):
    """Form mode params, for code that wants the spec's narrower name."""

    requested_schema: dict[str, Any]


class ElicitRequestURLParams(ElicitRequestParams):
    """URL mode params, for code that wants the spec's narrower name."""

    mode: Literal["form", "url"] | None = "url"
    url: str


ElicitAction = Literal["accept", "decline", "cancel"]


class ElicitResult(McpModel):
    """The user's answer: `accept` (with `content` in form mode), `decline` or `cancel`."""

    action: ElicitAction
    content: dict[str, Any] | None = None

    def is_accepted(self) -> bool:
        """True when the user accepted."""
        return self.action == "accept"


T = TypeVar("T")


class ElicitResultTyped(BaseModel, Generic[T]):
    """An elicitation answer whose content is validated into the caller's type `T`."""

    action: ElicitAction  # "accept", "decline" or "cancel"
    content: T | None = None  # the answer as a `T`, when accepted

    def is_accepted(self) -> bool:
        """True when the user accepted."""
        return self.action == "accept"

    @property
    def data(self) -> T | None:
        """`content`, as the official SDK and FastMCP name it."""
        return self.content


__all__ = [
    "BooleanSchema",
    "ElicitAction",
    "ElicitRequestFormParams",
    "ElicitRequestParams",
    "ElicitRequestURLParams",
    "ElicitResult",
    "ElicitResultTyped",
    "EnumOption",
    "LegacyTitledEnumSchema",
    "NumberSchema",
    "PrimitiveSchemaDefinition",
    "StringSchema",
    "TitledEnumItems",
    "TitledMultiSelectEnumSchema",
    "TitledSingleSelectEnumSchema",
    "UntitledEnumItems",
    "UntitledMultiSelectEnumSchema",
    "UntitledSingleSelectEnumSchema",
]
