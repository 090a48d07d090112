"""Where tokens and client registrations are kept: `TokenStore`, and two stores.

A store maps string keys to JSON-able dicts. The OAuth client keeps two kinds of entries: the
tokens for one MCP server (`tokens <resource>`, each naming the issuer that granted them) and
the client registration at one authorization server (`client <issuer>`): credentials belong
to the server that issued them and are never offered to another.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import orjson


@runtime_checkable
class TokenStore(Protocol):
    """Keeps the OAuth client's tokens and registrations. Implementations must be safe to
    call from concurrent tasks; values are small JSON-able dicts."""

    async def load(self, key: str) -> dict[str, Any] | None:
        """The value saved under `key`, or None."""
        ...

    async def save(self, key: str, value: dict[str, Any] | None) -> None:
        """Save `value` under `key`; None removes the entry."""
        ...


class MemoryTokenStore:
    """A `TokenStore` in this process's memory: gone when the process ends (the default)."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, Any]] = {}

    async def load(self, key: str) -> dict[str, Any] | None:
        """The value saved under `key`, or None."""
        value = self._entries.get(key)
        return dict(value) if value is not None else None

    async def save(self, key: str, value: dict[str, Any] | None) -> None:
        """Save `value` under `key`; None removes the entry."""
        if value is None:
            self._entries.pop(key, None)
        else:
            self._entries[key] = dict(value)


class FileTokenStore:
    """A `TokenStore` in one JSON file readable by its owner only (mode 0600, in a directory
    created 0700), rewritten atomically on each change: what `mrtr call` uses, so a person
    signs in once per server rather than once per command."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = asyncio.Lock()

    async def load(self, key: str) -> dict[str, Any] | None:
        """The value saved under `key`, or None (also when the file is missing or unreadable)."""
        async with self._lock:
            entries = await asyncio.to_thread(self._read)
        value = entries.get(key)
        return value if isinstance(value, dict) else None

    async def save(self, key: str, value: dict[str, Any] | None) -> None:
        """Save `value` under `key`; None removes the entry."""
        async with self._lock:
            await asyncio.to_thread(self._update, key, value)

    def _read(self) -> dict[str, Any]:
        try:
            entries = orjson.loads(self.path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return {}
        return entries if isinstance(entries, dict) else {}

    def _update(self, key: str, value: dict[str, Any] | None) -> None:
        entries = self._read()
        if value is None:
            entries.pop(key, None)
        else:
            entries[key] = value
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Written next to the target and renamed over it: a crash leaves the old file whole,
        # and the secret never sits in a file anyone else can read, even for a moment.
        fd, temporary = tempfile.mkstemp(prefix=".tokens-", dir=self.path.parent)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(orjson.dumps(entries, option=orjson.OPT_INDENT_2))
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise


__all__ = ["FileTokenStore", "MemoryTokenStore", "TokenStore"]
