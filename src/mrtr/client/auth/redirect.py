"""The part of the authorization code flow that happens in a browser.

The client builds the authorization URL; a `RedirectHandler`, supplied by the application,
sends the person there (opens a browser, prints the URL...) and returns what the
authorization server sent back to `redirect_uri`: an `AuthorizationResponse`. The client then
checks it (state, RFC 9207 `iss`) before it trusts anything in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable
from urllib.parse import parse_qs, urlsplit


class InvalidCallback(ValueError):
    """The redirect back from the authorization server is not a valid authorization response."""


@dataclass(frozen=True, slots=True)
class AuthorizationResponse:
    """The parameters of the redirect back to the client (RFC 6749 4.1.2)."""

    code: str | None = None
    state: str | None = None
    iss: str | None = None
    error: str | None = None
    error_description: str | None = None

    def __repr__(self) -> str:  # the code is a credential until it is redeemed
        return (
            f"AuthorizationResponse(state={self.state!r}, iss={self.iss!r}, error={self.error!r})"
        )

    @classmethod
    def from_url(cls, url: str) -> AuthorizationResponse:
        """The response carried by a callback URL's query; `InvalidCallback` when a parameter
        appears twice (RFC 9207 2.4 asks that such a response be refused)."""
        return cls.from_query(urlsplit(url).query)

    @classmethod
    def from_query(cls, query: str) -> AuthorizationResponse:
        """The response in a form-encoded query string."""
        try:
            values = parse_qs(query, keep_blank_values=True, max_num_fields=64)
        except ValueError as exc:
            raise InvalidCallback(f"unreadable callback query: {exc}") from None

        def one(name: str) -> str | None:
            found = values.get(name)
            if found is None:
                return None
            if len(found) != 1:
                raise InvalidCallback(f"the callback carries {name!r} {len(found)} times")
            return found[0]

        return cls(
            code=one("code"),
            state=one("state"),
            iss=one("iss"),
            error=one("error"),
            error_description=one("error_description"),
        )


@runtime_checkable
class RedirectHandler(Protocol):
    """Takes a person through the authorization server's login and consent pages.

    `redirect_uri` is where the authorization server sends the browser back (it is
    registered with the server); `authorize` sends the person to `url` and returns the
    parameters of that redirect.
    """

    @property
    def redirect_uri(self) -> str:
        """The URI the authorization server redirects back to."""
        ...

    async def authorize(self, url: str) -> AuthorizationResponse:
        """Open `url` for the person and wait for the redirect back."""
        ...


__all__ = ["AuthorizationResponse", "InvalidCallback", "RedirectHandler"]
