"""This process's own stdin and stdout as asyncio streams, for `serve_stdio`.

While they are open, file descriptors 0 and 1 are pointed at the null device and at stderr, so
a stray `print()`, `input()`, C library or child process cannot read from or write into the
message stream; both are restored on close. Pipes and sockets are polled by the event loop; a
terminal or a regular file (which cannot be polled, and a terminal must not be made
non-blocking since stderr shares it) is read on a thread and written directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
import threading
from collections.abc import AsyncIterator
from typing import Protocol, cast

_CHUNK = 64 * 1024


class LineWriter(Protocol):
    """Where `serve_stdio` writes its lines; `asyncio.StreamWriter` is one."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...


@contextlib.asynccontextmanager
async def open_stdin(limit: int) -> AsyncIterator[asyncio.StreamReader]:
    """A StreamReader on the process's stdin (fd 0 is pointed at the null device meanwhile)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    saved = os.dup(0)
    fd = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    transport: asyncio.BaseTransport | None = None
    try:
        if _is_pipe(fd):
            pipe = os.fdopen(fd, "rb", buffering=0)
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), pipe
            )
        else:
            # A terminal or a regular file cannot be polled (or must not be made non-blocking,
            # which a terminal would share with stderr): read it on a thread.
            # The thread owns `fd` and may sit in a read that nothing can interrupt, so it is
            # left to end with the process.
            threading.Thread(
                target=_pump, args=(fd, reader, loop), name="mrtr-stdin", daemon=True
            ).start()
        yield reader
    finally:
        if transport is not None:
            transport.close()
        os.dup2(saved, 0)
        os.close(saved)
        with contextlib.suppress(OSError):
            os.set_blocking(0, True)


def _pump(fd: int, reader: asyncio.StreamReader, loop: asyncio.AbstractEventLoop) -> None:
    """Feed `reader` from a blocking file descriptor until end-of-file (runs on a thread)."""
    try:
        while True:
            try:
                chunk = os.read(fd, _CHUNK)
            except OSError:
                chunk = b""
            if not chunk:
                loop.call_soon_threadsafe(reader.feed_eof)
                return
            loop.call_soon_threadsafe(reader.feed_data, chunk)
    except RuntimeError:
        return  # the event loop is closed: serving has ended


@contextlib.asynccontextmanager
async def open_stdout() -> AsyncIterator[LineWriter]:
    """A LineWriter on the process's stdout (fd 1 is pointed at stderr meanwhile)."""
    loop = asyncio.get_running_loop()
    _flush_sys_stdout()  # what was printed before serving keeps its place ahead of it
    saved = os.dup(1)
    fd = os.dup(1)
    os.dup2(2, 1)
    writer: _PipeWriter | _BlockingWriter | None = None
    try:
        if _is_pipe(fd):
            pipe = _PipeWriter(loop)
            await loop.connect_write_pipe(lambda: pipe, os.fdopen(fd, "wb", buffering=0))
            writer = pipe
        else:
            writer = _BlockingWriter(fd)
        yield writer
    finally:
        if writer is not None:
            await writer.aclose()
        _flush_sys_stdout()  # what was printed while serving belongs on stderr
        os.dup2(saved, 1)
        os.close(saved)
        with contextlib.suppress(OSError):
            os.set_blocking(1, True)


def _flush_sys_stdout() -> None:
    with contextlib.suppress(Exception):  # sys.stdout may be None or closed
        sys.stdout.flush()


def _is_pipe(fd: int) -> bool:
    if sys.platform == "win32":
        return False  # the Windows event loops cannot poll an inherited pipe
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class _PipeWriter(asyncio.Protocol):
    """A write pipe with flow control: `drain` waits while the OS pipe is full."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._transport: asyncio.WriteTransport | None = None
        self._resumed: asyncio.Future[None] | None = None
        self._lost: asyncio.Future[None] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A cast, not an isinstance check: uvloop's pipe transports do not subclass asyncio's.
        self._transport = cast(asyncio.WriteTransport, transport)

    def pause_writing(self) -> None:
        self._resumed = self._loop.create_future()

    def resume_writing(self) -> None:
        resumed, self._resumed = self._resumed, None
        if resumed is not None and not resumed.done():
            resumed.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._lost.done():
            self._lost.set_result(None)
        self.resume_writing()

    def write(self, data: bytes) -> None:
        if self._lost.done() or self._transport is None:
            raise BrokenPipeError("stdout is closed")
        self._transport.write(data)

    async def drain(self) -> None:
        if self._lost.done():
            raise BrokenPipeError("stdout is closed")
        if self._resumed is not None:
            await asyncio.shield(self._resumed)  # shared by every writer waiting for room

    async def aclose(self) -> None:
        """Flush what is buffered, then close; gives up if the reader stops reading."""
        if self._transport is None:
            return
        self._transport.close()  # closes once the buffer is written out
        try:
            async with asyncio.timeout(5.0):
                await asyncio.shield(self._lost)
        except TimeoutError:
            self._transport.abort()


class _BlockingWriter:
    """Writes to a terminal or a regular file; such writes do not block for long."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    async def drain(self) -> None:
        return None

    async def aclose(self) -> None:
        os.close(self._fd)
