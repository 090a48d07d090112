"""Newline-delimited JSON-RPC framing, shared by both ends of the stdio transport.

Every message is one `orjson` encode (which never emits a raw newline, so the newline it
appends is the only one) and one write; every received line is one decode. A line over the
size limit is never decoded: `leading_id` reads the id at its start, when it can be read
safely, so the refusal can still name the request.
"""

from __future__ import annotations

import logging
import re

import orjson

from ..protocol import jsonrpc

logger = logging.getLogger("mrtr.stdio")


NEWLINE = orjson.OPT_APPEND_NEWLINE
# A request's id, when it is the first member or follows "jsonrpc" (as every SDK writes it).
# Only these top-level positions are trusted, so an "id" nested in params is never matched.
_LEADING_ID = re.compile(
    rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")'
)


def leading_id(head: bytes) -> jsonrpc.RequestId | None:
    """The id at the start of a message too large to decode, if it can be read safely."""
    match = _LEADING_ID.match(head)
    if match is None:
        return None
    try:
        value = orjson.loads(match.group(1))
    except orjson.JSONDecodeError:
        return None
    return value if jsonrpc.is_valid_id(value) else None


def describe_size(n: int) -> str:
    """A byte count for a log line (`16 MiB`, `4096 bytes`)."""
    return f"{n / (1024 * 1024):g} MiB" if n >= 1024 * 1024 else f"{n} bytes"
