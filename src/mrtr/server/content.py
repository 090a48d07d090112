"""Content helpers: `Image`, `Audio` and `File`, made from a path or from bytes.

Return one from a tool (or a prompt), alone or in a list with other content (strings become
text blocks), and it becomes the matching content block: an image, an audio clip, or a file
embedded as a blob resource. Returned from a resource handler, each is a blob with its MIME
type. The MIME type is given, or guessed from the file name, or sniffed from the first bytes.
A path is read when the helper is made, so a missing file fails inside the handler that
named it.
"""

from __future__ import annotations

import base64
import mimetypes
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..protocol.types import AudioContent, ImageContent
from .media import OCTET_STREAM, sniff_mime_type

# The extensions whose MIME subtype is spelled otherwise (`format="jpg"` is `image/jpeg`).
_SUBTYPES = {"jpg": "jpeg", "svg": "svg+xml", "tif": "tiff", "mp3": "mpeg", "oga": "ogg"}


class _Media:
    """Bytes with a MIME type, from a path or given as they are."""

    __slots__ = ("data", "mime_type", "name")
    _kind = "file"

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        data: bytes | None = None,
        mime_type: str | None = None,
        name: str | None = None,
        format: str | None = None,
    ) -> None:
        """`format`: a file extension (`"png"`, `"wav"`) naming the MIME type, as the official
        SDK and FastMCP spell it; `mime_type` says the same in full."""
        if (path is None) == (data is None):
            raise TypeError(f"{type(self).__name__}() takes a path or data=..., exactly one")
        if format is not None:
            mime_type = self._format_mime(format, mime_type)
        self.name: str | None
        if path is not None:
            file = Path(path)
            self.data = file.read_bytes()
            self.name = name or file.name
            guessed = mimetypes.guess_type(file.name)[0]
        else:
            assert data is not None
            self.data = bytes(data)
            self.name = name
            guessed = mimetypes.guess_type(name)[0] if name else None
        self.mime_type = mime_type or guessed or self._sniff()

    def _format_mime(self, format: str, mime_type: str | None) -> str:
        kind = type(self).__name__
        if mime_type is not None:
            raise TypeError(f"{kind}() takes format= or mime_type=, not both")
        extension = format.lower().lstrip(".")
        if not extension or "/" in extension:
            raise ValueError(
                f"{kind}(format={format!r}): format is a file extension such as 'png'; "
                "pass a MIME type as mime_type=... instead"
            )
        if self._kind == "file":
            return mimetypes.guess_type(f"file.{extension}")[0] or OCTET_STREAM
        return f"{self._kind}/{_SUBTYPES.get(extension, extension)}"

    def _sniff(self) -> str:
        mime = sniff_mime_type(self.data)
        if mime == OCTET_STREAM and self._kind != "file":
            raise ValueError(
                f"{type(self).__name__}: cannot tell the {self._kind} format from its bytes; "
                "pass mime_type=... (for example 'image/png' or 'audio/wav')"
            )
        return mime

    @property
    def base64(self) -> str:
        """The bytes, base64-encoded as the wire carries them."""
        return base64.b64encode(self.data).decode("ascii")

    def to_block(self) -> dict[str, Any]:
        """The content block (wire dict) this stands for."""
        return {"type": self._kind, "data": self.base64, "mimeType": self.mime_type}

    def to_resource_contents(self, uri: str) -> dict[str, Any]:
        """Blob resource contents at `uri` (a resource handler's result)."""
        return {"uri": uri, "mimeType": self.mime_type, "blob": self.base64}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name or ''!r}, {self.mime_type}, {len(self.data)} B)"


class Image(_Media):
    """An image for the model: `Image("chart.png")` or `Image(data=png_bytes)`."""

    __slots__ = ()
    _kind = "image"

    def to_image_content(self) -> ImageContent:
        """The image as an `ImageContent` block (returning the `Image` itself does the same)."""
        return ImageContent(data=self.base64, mime_type=self.mime_type)


class Audio(_Media):
    """An audio clip: `Audio("note.wav")` or `Audio(data=wav_bytes)`."""

    __slots__ = ()
    _kind = "audio"

    def to_audio_content(self) -> AudioContent:
        """The clip as an `AudioContent` block (returning the `Audio` itself does the same)."""
        return AudioContent(data=self.base64, mime_type=self.mime_type)


class File(_Media):
    """Any file, embedded as a blob resource: `File("report.pdf")` or `File(data=..., name=...)`.

    `uri` names it in the result (by default `file:///<name>`, the name only: a server's
    own paths stay on the server).
    """

    __slots__ = ("uri",)

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        data: bytes | None = None,
        mime_type: str | None = None,
        name: str | None = None,
        uri: str | None = None,
        format: str | None = None,
    ) -> None:
        super().__init__(path, data=data, mime_type=mime_type, name=name, format=format)
        #: The URI the embedded resource is given (default: `file:///<name>`).
        self.uri = uri or f"file:///{quote(self.name or 'file')}"

    def to_block(self) -> dict[str, Any]:
        """An embedded resource block holding the file as a blob."""
        return {"type": "resource", "resource": self.to_resource_contents(self.uri)}


#: What a handler may return to mean a content block.
MediaContent = Image | Audio | File

__all__ = ["Audio", "File", "Image", "MediaContent"]
