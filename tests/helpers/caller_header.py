"""Who calls a test server: the `x-test-user` HTTP header (a stand-in for verified
credentials), or a string a memory or stdio test passes as transport info."""

from __future__ import annotations

from typing import Any

HEADER = b"x-test-user"


def caller(info: Any) -> str | None:
    """The caller named by `info` (`ServerOptions.principal`): a string as it is, the
    `x-test-user` header of an HTTP scope, else None."""
    if isinstance(info, str):
        return info
    if isinstance(info, dict):
        for name, value in info.get("headers") or ():
            if name == HEADER:
                return bytes(value).decode()
    return None
