"""Binary values as MCP content: the MIME type sniffed from the first bytes, and the block to
carry them in (image, audio, or an embedded blob resource for anything else)."""

from __future__ import annotations

import base64
from typing import Any

# Signatures of the formats a client is likely to render; everything else is a blob.
_SIGNATURES: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"WEBP", 8, "image/webp"),
    (b"WAVE", 8, "audio/wav"),
    (b"ID3", 0, "audio/mpeg"),
    (b"\xff\xfb", 0, "audio/mpeg"),
    (b"OggS", 0, "audio/ogg"),
    (b"fLaC", 0, "audio/flac"),
    (b"%PDF-", 0, "application/pdf"),
)
OCTET_STREAM = "application/octet-stream"


def sniff_mime_type(data: bytes) -> str:
    """The MIME type `data` starts like, or `application/octet-stream`."""
    for signature, offset, mime in _SIGNATURES:
        if data[offset : offset + len(signature)] == signature:
            if offset == 8 and data[:4] != b"RIFF":
                continue  # WEBP and WAVE live in a RIFF container
            return mime
    return OCTET_STREAM


def binary_content(data: bytes, uri: str, mime_type: str | None = None) -> dict[str, Any]:
    """A content block for `data`: image or audio by MIME type, else an embedded blob at `uri`."""
    mime = mime_type or sniff_mime_type(data)
    encoded = base64.b64encode(data).decode("ascii")
    if mime.startswith("image/"):
        return {"type": "image", "data": encoded, "mimeType": mime}
    if mime.startswith("audio/"):
        return {"type": "audio", "data": encoded, "mimeType": mime}
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime, "blob": encoded}}
