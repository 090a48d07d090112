"""`ClientGroup`: several servers, opened together, their tools under one namespace.

A tool of server `files` named `read` is `files.read` in the group (the separator, `"."` by
default, is the `separator=` argument: pick `"__"` or `"_"` when the names go to a model API
that allows no dots). A qualified name is split at the longest server name it starts with,
so tool names may hold the separator too.

A server that cannot be opened (a command that does not start, an endpoint that does not
answer within `open_timeout`, an invalid configuration entry) is left out, its error kept in
`group.errors`, and the others work as usual; a server that fails during `list_tools()` is
skipped the same way (its error in `errors` until it answers again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..deadline import Deadline
from ..protocol.errors import REQUEST_TIMEOUT, McpError
from ..protocol.types import CallToolResult, Tool
from .client import Client
from .config import ConfigSource, parse_config
from .pagination import DEFAULT_MAX_PAGES

logger = logging.getLogger("mrtr.client")


class ClientGroup:
    """Clients of several servers by name; an async context manager that opens them all.

    `group["name"]` is one server's `Client`; `await group.list_tools()` lists every open
    server's tools as `server.tool`, and `await group.call_tool("server.tool", args)` calls one.
    """

    def __init__(
        self,
        clients: Mapping[str, Client],
        *,
        separator: str = ".",
        open_timeout: float = 30.0,
        errors: Mapping[str, Exception] | None = None,
    ) -> None:
        if not separator:
            raise ValueError("separator must be a non-empty string")
        self._clients = dict(clients)
        #: Joins a server's name and a tool's (`weather.forecast`).
        self.separator = separator
        #: Seconds each server gets to open before it counts as failed.
        self.open_timeout = open_timeout
        #: The latest error of each server that could not be opened or failed a group call.
        self.errors: dict[str, Exception] = dict(errors or {})

    @classmethod
    def from_config(
        cls,
        source: ConfigSource,
        *,
        names: Sequence[str] | None = None,
        separator: str = ".",
        open_timeout: float = 30.0,
        **client_kwargs: Any,
    ) -> ClientGroup:
        """A group of the servers of an `mcp.json` (path or dict): all of them, or `names`.

        `client_kwargs` (handlers, `options`, ...) go to every `Client`. An invalid entry is
        reported in `errors` instead of stopping the others; a name in `names` that the
        configuration does not have raises `ValueError`.
        """
        servers, invalid = parse_config(source)
        wanted = list(names) if names is not None else [*servers, *invalid]
        unknown = [name for name in wanted if name not in servers and name not in invalid]
        if unknown:
            raise ValueError(
                f"the configuration has no server {', '.join(map(repr, unknown))} "
                f"(it has: {', '.join(map(repr, [*servers, *invalid])) or 'none'})"
            )
        clients = {
            name: Client.from_server_config(servers[name], **client_kwargs)
            for name in wanted
            if name in servers
        }
        errors: dict[str, Exception] = {name: invalid[name] for name in wanted if name in invalid}
        return cls(clients, separator=separator, open_timeout=open_timeout, errors=errors)

    # --- opening and closing --------------------------------------------------------------

    async def __aenter__(self) -> ClientGroup:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Open every server at once (connect, then `server/discover`, which settles its
        era); those that fail are closed, left out, and named in `errors` (and logged)."""
        names = list(self._clients)
        outcomes = await asyncio.gather(*(self._open_one(name) for name in names))
        for name, error in zip(names, outcomes, strict=True):
            if error is not None:
                logger.warning("MCP server %r could not be opened: %s", name, error)
                self.errors[name] = error
                client = self._clients.pop(name)
                with contextlib.suppress(Exception):
                    await client.close()

    async def _open_one(self, name: str) -> Exception | None:
        client = self._clients[name]
        try:
            with Deadline(self.open_timeout):
                await client.connect()
                await client.discover()
        except TimeoutError:
            return McpError(
                REQUEST_TIMEOUT, f"server {name!r} did not answer within {self.open_timeout:g} s"
            )
        except Exception as exc:  # whatever it is, it is this server's and only this one's
            return exc
        return None

    async def close(self) -> None:
        """Close every server's client (ending stdio servers)."""
        await asyncio.gather(
            *(client.close() for client in self._clients.values()), return_exceptions=True
        )

    # --- the servers ----------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """The servers that are open, in configuration order."""
        return list(self._clients)

    def __getitem__(self, name: str) -> Client:
        client = self._clients.get(name)
        if client is None:
            if name in self.errors:
                raise KeyError(f"server {name!r} is not open: {self.errors[name]}")
            raise KeyError(f"no server {name!r} in this group (it has: {', '.join(self._clients)})")
        return client

    def __contains__(self, name: object) -> bool:
        return name in self._clients

    def __iter__(self) -> Iterator[str]:
        return iter(self._clients)

    def __len__(self) -> int:
        return len(self._clients)

    # --- tools under one namespace ----------------------------------------------------------

    def split(self, qualified: str) -> tuple[str, str]:
        """`("server", "tool")` for `"server.tool"`; `ValueError` when no open server's name
        (followed by the separator) starts it."""
        candidates = [name for name in self._clients if qualified.startswith(name + self.separator)]
        best = max(candidates, key=len, default=None)
        if best is None:
            raise ValueError(
                f"{qualified!r} names no tool of an open server: expected "
                f"'<server>{self.separator}<tool>' with a server among "
                f"{', '.join(self._clients) or 'none'}"
            )
        return best, qualified[len(best) + len(self.separator) :]

    async def list_tools(self, *, max_pages: int = DEFAULT_MAX_PAGES) -> list[Tool]:
        """Every tool of every open server (all pages), named `server<separator>tool`. A
        server that fails is skipped, its error in `errors`."""
        names = list(self._clients)
        outcomes = await asyncio.gather(
            *(self._clients[name].all_tools(max_pages=max_pages) for name in names),
            return_exceptions=True,
        )
        tools: list[Tool] = []
        for name, outcome in zip(names, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome  # a cancellation, not this server's failure
                logger.warning("listing the tools of MCP server %r failed: %s", name, outcome)
                self.errors[name] = outcome
                continue
            self.errors.pop(name, None)
            prefix = name + self.separator
            tools.extend(tool.model_copy(update={"name": prefix + tool.name}) for tool in outcome)
        return tools

    async def call_tool(
        self, qualified: str, arguments: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> CallToolResult:
        """Call `server<separator>tool` on its server (keyword arguments as `Client.call_tool`)."""
        server, tool = self.split(qualified)
        return await self._clients[server].call_tool(tool, arguments, **kwargs)
