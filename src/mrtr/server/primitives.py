"""What a server offers: tools, prompts, resources and resource templates, and how each
handler's return value becomes a wire result.

Listings are rendered to wire dicts once, at registration; results are built as dicts, never
through an intermediate model, because this is the hot path.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import re
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, TypedDict

import orjson
from pydantic import BaseModel

from ..inputs import InputRequiredResult
from ..protocol.tasks import TaskSupport
from ..protocol.types import (
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    GetPromptResult,
    Icon,
    PromptMessage,
    ReadResourceResult,
    TextResourceContents,
    ToolAnnotations,
)
from ._engine.outcome import Failure
from .content import _Media
from .docstrings import parse_docstring
from .media import binary_content
from .signature import AnyFunction, FunctionSignature, OutputMismatch, OutputShape
from .tasks.settings import TaskSettings, task_settings
from .tool_error import ToolError, failure_text
from .uri_template import UriTemplate, has_expressions
from .worker_threads import WorkerPool

# server/tools.md: names SHOULD use only these characters; clients may refuse others.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
_CONTENT_TYPES = ("text", "image", "audio", "resource_link", "resource")


def _json_text(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def _content_block(value: Any) -> dict[str, Any] | None:
    """A content block as a wire dict, when `value` is one (or an `Image`, `Audio`, `File`)."""
    if isinstance(value, _Media):
        return value.to_block()
    if isinstance(value, BaseModel) and getattr(value, "type", None) in _CONTENT_TYPES:
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return None


def _content_list(value: Any) -> list[dict[str, Any]] | None:
    """A list of content blocks as wire dicts, when `value` is one (or a single block).

    Strings in a list that holds at least one block are text blocks (`["Chart:", Image(...)]`);
    a list of strings alone is data.
    """
    block = _content_block(value)
    if block is not None:
        return [block]
    if isinstance(value, list | tuple) and value:
        blocks: list[dict[str, Any]] = []
        texts = 0
        for item in value:
            if isinstance(item, str):
                blocks.append({"type": "text", "text": item})
                texts += 1
                continue
            found = _content_block(item)
            if found is None:
                return None
            blocks.append(found)
        if texts < len(blocks):
            return blocks
    return None


def _tag_set(tags: Collection[str] | None) -> frozenset[str]:
    if tags is None:
        return frozenset()
    if isinstance(tags, str):
        return frozenset((tags,))  # one tag, not its letters
    return frozenset(tags)


def _positive_timeout(timeout: float | None) -> float | None:
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
    ):
        raise ValueError(f"timeout must be a positive number of seconds or None, not {timeout!r}")
    return None if timeout is None else float(timeout)


def _listing(**fields: Any) -> dict[str, Any]:
    """A listing's wire dict: the fields in order, without those not given (None or empty)."""
    wire = {key: value for key, value in fields.items() if value not in (None, "", [], {})}
    if "icons" in wire:
        wire["icons"] = [icon.to_wire() for icon in wire["icons"]]
    return wire


def _doc(fn: AnyFunction, description: str | None) -> str | None:
    if description is not None:
        return description
    # Dedented, without the parameter section (it describes the arguments in the schema).
    return parse_docstring(fn.__doc__).description


def tool_error(message: str) -> dict[str, Any]:
    """A `CallToolResult` wire dict reporting a failure the model can read (`isError`)."""
    return {"content": [{"type": "text", "text": message}], "isError": True}


# RFC 6749 3.3: a scope token is printable ASCII without space, double quote or backslash.
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")


def _scope_set(scopes: Collection[str] | None) -> frozenset[str]:
    if scopes is None:
        return frozenset()
    if isinstance(scopes, str):
        raise ValueError("scopes must be a list of scope names, not one string")
    for scope in scopes:
        if not isinstance(scope, str) or not _SCOPE_TOKEN.fullmatch(scope):
            raise ValueError(
                f"scope {scope!r} is not an OAuth scope token (printable ASCII, no space, "
                "quote or backslash)"
            )
    return frozenset(scopes)


class PromptFields(TypedDict, total=False):
    """What `@server.prompt` takes besides the name: the listing's `title`, `description`
    (else the docstring's), `icons` and `meta`; `run_in_thread`: a sync function runs in a
    worker thread (False: on the event loop); `tags`: for `Server.enable`/`disable`."""

    title: str | None
    description: str | None
    icons: Sequence[Icon] | None
    meta: dict[str, Any] | None
    run_in_thread: bool
    tags: Collection[str] | None


class TemplateFields(PromptFields, total=False):
    """What `@server.resource_template` takes besides the URI template: as for a prompt, and
    the listing's `name` (else the function's) and `mime_type`."""

    name: str | None
    mime_type: str | None


class ResourceFields(TemplateFields, total=False):
    """What `@server.resource` takes besides the URI: as for a template, and its `size`."""

    size: int | None


class ToolFields(PromptFields, total=False):
    """What `@server.tool` takes besides the name: as for a prompt, and the tool's
    `annotations`, `input_schema` and `output_schema` (else from the signature),
    `structured_output`; `timeout`: seconds one call may take before it is a tool error;
    `scopes`: OAuth scopes a caller's token needs to call it (`ServerOptions.auth`); `task`:
    how its calls become tasks, "optional", "required" or a `TaskSettings` (default "never")."""

    annotations: ToolAnnotations | None
    input_schema: dict[str, Any] | None
    output_schema: dict[str, Any] | None
    structured_output: bool | None
    timeout: float | None
    scopes: Collection[str] | None
    task: TaskSupport | TaskSettings


class ToolEntry:
    """A registered tool.

    `run_in_thread`: a sync function runs in a worker thread (False: on the event loop).
    `timeout`: seconds one call may take before it is a tool error. `tags`: for
    `Server.enable`/`disable`. `scopes`: OAuth scopes a caller's token needs to call it
    (`ServerOptions.auth`; checked over HTTP, where tokens are). `task`: how its calls become
    tasks (None: never; see `mrtr.server.tasks.TaskSettings`).
    """

    __slots__ = (
        "direct",
        "name",
        "output",
        "run_in_thread",
        "scopes",
        "signature",
        "tags",
        "task",
        "timeout",
        "wire",
    )

    def __init__(
        self,
        fn: AnyFunction,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: Sequence[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        input_schema: dict[str, Any] | None = None,
        output_schema: dict[str, Any] | None = None,
        structured_output: bool | None = None,
        run_in_thread: bool = True,
        timeout: float | None = None,
        tags: Collection[str] | None = None,
        scopes: Collection[str] | None = None,
        task: Any = "never",
    ) -> None:
        self.name = name or fn.__name__
        self.run_in_thread = run_in_thread
        self.task = task_settings(task)
        self.scopes = _scope_set(scopes)
        self.timeout = _positive_timeout(timeout)
        self.tags = _tag_set(tags)
        if not _TOOL_NAME.fullmatch(self.name):
            raise ValueError(
                f"tool name {self.name!r} must be 1-128 characters of A-Z, a-z, 0-9, '_', '-', '.'"
            )
        self.signature = FunctionSignature(fn)
        #: Whether a call can run without a context: the function takes none (so cannot ask)
        #: and nothing of its own (a task, a timeout) needs one. Worked out once, here.
        self.direct = (
            self.signature.context_param is None
            and not self.signature.state_params
            and self.task is None
            and self.timeout is None
        )
        self.output = (
            OutputShape(None, None, False)
            if structured_output is False
            else OutputShape.from_annotation(self.signature.return_annotation)
        )
        self.wire = _listing(
            name=self.name,
            title=title,
            description=_doc(fn, description),
            inputSchema=input_schema or self.signature.input_schema(),
            outputSchema=output_schema or self.output.schema,
            annotations=annotations.to_wire() if annotations is not None else None,
            icons=icons,
            _meta=meta,
        )

    def invoker(
        self, kwargs: dict[str, Any], pool: WorkerPool | None
    ) -> Callable[[Any], Awaitable[Any]]:
        """How one call with the bound `kwargs` runs, given its context: the function started
        (a sync one on `pool`), bounded by the tool's `timeout` (past it, a tool error)."""
        signature = self.signature
        timeout = self.timeout
        if timeout is None:
            return functools.partial(signature.start, kwargs, pool=pool)
        name = self.name

        async def invoke(ctx: Any) -> Any:
            scope = asyncio.timeout(timeout)
            try:
                async with scope:
                    return await signature.call(dict(kwargs), ctx, pool)
            except TimeoutError:
                if not scope.expired():
                    raise  # the tool's own TimeoutError: a failure like any other
                raise ToolError(
                    f"Tool {name!r} did not finish within its timeout ({timeout:g} s)"
                ) from None

        return invoke

    def render(self, mask: bool, value: Any) -> dict[str, Any] | InputRequiredResult:
        """The tool's result from its value, or from the `Failure` its run ended with (the
        engine sorts out protocol errors, which stay errors, from the tool's own); `mask`:
        `ServerOptions.mask_errors`."""
        if type(value) is Failure:
            name = self.name
            prefix = f"Error executing tool {name!r}: "
            return tool_error(failure_text(value.exc, f"tool {name!r}", mask, prefix))
        return self.result(value)

    def result(self, value: Any) -> dict[str, Any] | InputRequiredResult:
        """The `CallToolResult` wire dict (or an input request) for a returned value."""
        if type(value) is str and self.output.adapter is None:
            # The commonest return, and one no other case below claims: a text block.
            return {"content": [{"type": "text", "text": value}]}
        if isinstance(value, InputRequiredResult):
            return value
        if isinstance(value, CallToolResult):
            if value.input_required is not None:
                return value.input_required  # type: ignore[no-any-return]
            return value.to_wire()
        # A dict is the tool's data, whatever keys it has (a tool relaying JSON from elsewhere
        # must never make the client ask its user something): only an `InputRequiredResult` or
        # `CallToolResult.input_required` asks.
        content = _content_list(value)
        if content is not None:
            return {"content": content}
        if isinstance(value, bytes | bytearray | memoryview):
            return {"content": [binary_content(bytes(value), f"mrtr://tools/{self.name}/result")]}
        if isinstance(value, str) and self.output.adapter is None:
            return {"content": [{"type": "text", "text": value}]}
        if self.output.adapter is not None:
            try:
                structured = self.output.structured(value)
            except OutputMismatch as exc:
                return tool_error(
                    f"Tool {self.name!r} returned a result that does not match its output "
                    f"schema: {exc}"
                )
            text = (
                value
                if isinstance(value, str)
                else _json_text(structured if not self.output.wrap else structured["result"])
            )
            return {"content": [{"type": "text", "text": text}], "structuredContent": structured}
        if value is None:
            return {"content": []}
        if isinstance(value, BaseModel):
            data = value.model_dump(mode="json", by_alias=True, exclude_none=True)
            return {
                "content": [{"type": "text", "text": _json_text(data)}],
                "structuredContent": data,
            }
        return {
            "content": [
                {"type": "text", "text": value if isinstance(value, str) else _json_text(value)}
            ]
        }


class PromptEntry:
    """A registered prompt; its arguments come from the function's signature."""

    __slots__ = ("name", "run_in_thread", "signature", "tags", "wire")

    def __init__(
        self,
        fn: AnyFunction,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        icons: Sequence[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        run_in_thread: bool = True,
        tags: Collection[str] | None = None,
    ) -> None:
        self.name = name or fn.__name__
        self.run_in_thread = run_in_thread
        self.tags = _tag_set(tags)
        self.signature = FunctionSignature(fn)
        schema = self.signature.input_schema()
        props = schema.get("properties", {})
        arguments = []
        for arg in self.signature.param_names:
            entry: dict[str, Any] = {"name": arg}
            desc = props.get(arg, {}).get("description")
            if desc:
                entry["description"] = desc
            entry["required"] = arg in self.signature.required
            arguments.append(entry)
        self.wire = _listing(
            name=self.name,
            title=title,
            description=_doc(fn, description),
            arguments=arguments,
            icons=icons,
            _meta=meta,
        )

    def result(self, value: Any) -> dict[str, Any] | InputRequiredResult:
        """The `GetPromptResult` wire dict for a returned value."""
        if isinstance(value, InputRequiredResult):
            return value
        if isinstance(value, GetPromptResult):
            return value.to_wire()
        items = value if isinstance(value, list | tuple) else [value]
        messages = []
        for item in items:
            if isinstance(item, str):
                messages.append({"role": "user", "content": {"type": "text", "text": item}})
            elif isinstance(item, PromptMessage):
                messages.append(item.to_wire())
            elif isinstance(item, dict):
                messages.append(PromptMessage.model_validate(item).to_wire())
            else:
                block = _content_block(item)
                if block is None:
                    raise TypeError(
                        f"prompt {self.name!r} returned {type(item).__name__}; expected str, "
                        "PromptMessage, a content block or GetPromptResult"
                    )
                messages.append({"role": "user", "content": block})
        out: dict[str, Any] = {"messages": messages}
        if "description" in self.wire:
            out["description"] = self.wire["description"]
        return out


def resource_contents(uri: str, mime_type: str | None, value: Any) -> list[dict[str, Any]]:
    """Resource contents for a handler's return value (str -> text, bytes -> blob)."""
    items = value if isinstance(value, list | tuple) else [value]
    contents = []
    for item in items:
        if isinstance(item, str):
            entry: dict[str, Any] = {"uri": uri, "text": item}
        elif isinstance(item, bytes | bytearray | memoryview):
            entry = {"uri": uri, "blob": base64.b64encode(bytes(item)).decode()}
        elif isinstance(item, _Media):
            contents.append(item.to_resource_contents(uri))
            continue
        elif isinstance(item, TextResourceContents | BlobResourceContents):
            contents.append(item.to_wire())
            continue
        elif isinstance(item, dict) and ("text" in item or "blob" in item):
            contents.append(item)
            continue
        else:
            entry = {"uri": uri, "text": _json_text(item)}
            mime_type = mime_type or "application/json"
        if mime_type:
            entry["mimeType"] = mime_type
        contents.append(entry)
    return contents


class ResourceEntry:
    """A registered static resource, or a resource template: with `template`, or by default
    when the URI holds `{...}` expressions (`file:///docs/{path}`)."""

    __slots__ = ("mime_type", "run_in_thread", "signature", "tags", "template", "uri", "wire")

    def __init__(
        self,
        fn: AnyFunction,
        uri: str,
        *,
        template: bool | None = None,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
        size: int | None = None,
        icons: Sequence[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        run_in_thread: bool = True,
        tags: Collection[str] | None = None,
    ) -> None:
        self.uri = uri
        self.run_in_thread = run_in_thread
        self.tags = _tag_set(tags)
        self.mime_type = mime_type
        self.signature = FunctionSignature(fn)
        if template is None:
            template = has_expressions(uri)
        self.template = UriTemplate(uri) if template else None
        _check_variables(fn, uri, self.signature, self.template)
        self.wire = _listing(
            **{"uriTemplate" if template else "uri": uri},
            name=name or fn.__name__,
            title=title,
            description=_doc(fn, description),
            mimeType=mime_type,
            size=None if template else size,
            icons=icons,
            _meta=meta,
        )

    def result(self, uri: str, value: Any) -> dict[str, Any] | InputRequiredResult:
        """The `ReadResourceResult` wire dict (caching hints added by the server)."""
        if isinstance(value, InputRequiredResult):
            return value
        if isinstance(value, ReadResourceResult):
            return value.to_wire()
        return {"contents": resource_contents(uri, self.mime_type, value)}


def _check_variables(
    fn: AnyFunction, uri: str, signature: FunctionSignature, template: UriTemplate | None
) -> None:
    """Refuse a resource whose function's parameters and URI variables do not match: a
    read would fail, or silently drop a value, only when a client comes."""
    where = f"resource {uri!r} ({fn.__qualname__})"
    if template is None:
        if signature.required:
            name = signature.required[0]
            raise TypeError(
                f"{where}: parameter {name!r} has no value to come from, as the URI has no "
                f"template variables: write the URI as a template (for example "
                f"'file:///{{{name}}}'), or give {name!r} a default"
            )
        return
    variables = template.variables
    missing = [name for name in signature.required if name not in variables]
    if missing:
        raise TypeError(
            f"{where}: parameters {missing} are not template variables: add "
            f"{', '.join('{' + name + '}' for name in missing)} to the URI, or give them "
            "defaults"
        )
    unused = [name for name in variables if name not in signature.param_names]
    if unused:
        raise TypeError(
            f"{where}: URI template variables {unused} are not parameters of the function: "
            f"add parameters named {', '.join(unused)}, or rename the variables to match"
        )


#: `(ref, argument_name, value, context_arguments) -> list of values`, sync or async.
CompletionHandler = Callable[..., Any]

__all__ = [
    "CompletionHandler",
    "ContentBlock",
    "PromptEntry",
    "PromptFields",
    "ResourceEntry",
    "ResourceFields",
    "TemplateFields",
    "ToolEntry",
    "ToolFields",
    "resource_contents",
]
