"""Where an MCP server may send the OAuth client: the URLs discovery fetches on its word.

A 401 makes the client fetch URLs the server names (resource metadata, an authorization
server's metadata and endpoints). A hostile server could use that to have the client probe
or post to hosts behind it, so `Reach` says, for one MCP server, which of those URLs may be
fetched: the server's own origin always; https elsewhere, or plain http on loopback when the
server is itself on loopback (`allow_http` lifts the scheme rule for test networks); never a
loopback, link-local or private address unless the server is on loopback too; and origins
the application trusts (`trusted_origins`) as it configured them. Hosts are judged as
written (IP literals in every form the resolver accepts, and `localhost`), not resolved.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .metadata import is_loopback, secure_enough

_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_key(url: str) -> str:
    """The origin of `url` compared as RFC 6454 does: lower-case scheme and host, the port
    made explicit (`https://A.example` and `https://a.example:443` are one origin)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    port = port if port is not None else _DEFAULT_PORTS.get(scheme)
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def literal_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address a host name stands for without any lookup, or None for a real name.
    Besides dotted quads this reads what the system resolver takes as an IPv4 address too
    (`127.1`, `0x7f.0.0.1`, `2130706433`), and an IPv4-mapped IPv6 address as its IPv4."""
    host = host.strip("[]").rstrip(".").lower()
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(
            host.split("%", 1)[0]
        )
    except ValueError:
        if not host or not all(c in "0123456789abcdefx." for c in host):
            return None
        try:
            address = ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_internal(url: str) -> bool:
    """True when `url`'s host, as written, is this machine or a network not on the
    internet: `localhost`, or a loopback, link-local, private, shared, reserved or
    unspecified address."""
    host = (urlsplit(url).hostname or "").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    address = literal_address(host)
    return address is not None and (not address.is_global or address.is_multicast)


@dataclass(frozen=True, slots=True)
class Reach:
    """The URLs one MCP server (`server_url`) may make the client fetch: see the module."""

    server_url: str
    trusted_origins: frozenset[str] = field(default_factory=frozenset)
    allow_http: bool = False

    @classmethod
    def of(
        cls, server_url: str, trusted_origins: Iterable[str] = (), *, allow_http: bool = False
    ) -> Reach:
        """The reach of `server_url`, with the application's trusted origins."""
        return cls(server_url, frozenset(origin_key(o) for o in trusted_origins), allow_http)

    def owns(self, url: str) -> bool:
        """True when `url` is on the server's own origin."""
        return origin_key(url) == origin_key(self.server_url)

    def trusts(self, url: str) -> bool:
        """True when `url` is on the server's origin or one the application trusts."""
        return self.owns(url) or origin_key(url) in self.trusted_origins

    def refusal(self, url: str, *, vouched_by: str | None = None) -> str | None:
        """Why `url` may not be fetched on the server's word, or None when it may.
        `vouched_by`: a URL already accepted (an issuer, for its own endpoints) whose origin
        is as good as the server's."""
        scheme = urlsplit(url).scheme.lower()
        if scheme not in ("http", "https") or not urlsplit(url).hostname:
            return "it is not an http(s) URL"
        if self.trusts(url) or (vouched_by and origin_key(url) == origin_key(vouched_by)):
            return None
        if not secure_enough(url, self.allow_http, server_url=self.server_url):
            return "it is not https (plain http only on loopback, for a server on loopback)"
        if is_internal(url) and not is_loopback(self.server_url):
            return (
                "its host is a loopback, link-local or private address, and the server is not "
                "on loopback"
            )
        return None


__all__ = ["Reach", "is_internal", "literal_address", "origin_key"]
