"""Replay checks: a warning when code a round replays changes something (rule 12 of `replay.py`).

Code before the question the last round asked runs again on every round, so an effect there
repeats: a row inserted before two questions is inserted three times. While a checked run
replays, a profile hook (`sys.setprofile`, on the event loop's thread only, and only for as
long as such a run replays) watches the calls the handler's own tasks make into C, where every
effect ends up, and names the first of each kind with the fix (`ctx.once`):

* rows changed through a `sqlite3` connection or cursor (`total_changes` grew across the call:
  a `SELECT` is not an effect, an `INSERT` is, whatever the connection's transaction mode);
* a file opened for writing being written to, a file or directory removed, renamed or made;
* a process started;
* a socket connected or sent on (network I/O: a write to a remote system, or a slow read
  that belongs in `ctx.once` as well).

What it cannot see, and so never reports: effects in another thread (`asyncio.to_thread`, a
sync helper's pool) or another process, and drivers that reach the network through a
connection made before the round without sending from the handler's task. A profile hook is
the only place all of these pass without wrapping user objects; it costs a Python call per C
call while installed, which is why it is on only where it serves (`by_default`): while tests
run (pytest's `PYTEST_CURRENT_TEST` is set, in the process or the one that started it), in
Python's development mode (`python -X dev`), and with `ServerOptions(check_replay=True)`
(`MRTR_CHECK_REPLAY=1`); never for a transport's sake, so a server embedded in an
agent, in process, does not pay for it. Code inside `ctx.once` is not watched.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import socket
import sys
import threading
from types import FrameType, ModuleType
from typing import Any, Protocol

logger = logging.getLogger("mrtr.server")


@functools.cache
def by_default() -> bool:
    """Whether runs are checked when `ServerOptions.check_replay` is None: while tests run, or
    in development mode (the module's header); read once per process, at its first
    2026-07-28 request."""
    return bool(sys.flags.dev_mode or os.environ.get("PYTEST_CURRENT_TEST"))


_SQLITE_CALLS = frozenset({"execute", "executemany", "executescript"})
_SOCKET_CALLS = frozenset({"connect", "connect_ex", "send", "sendall", "sendto", "sendmsg"})
_FILE_CALLS = frozenset({"write", "writelines"})
_FS_CALLS = frozenset(
    {"remove", "unlink", "rename", "replace", "mkdir", "rmdir", "truncate", "symlink", "link"}
)
_PROCESS_CALLS = frozenset({"fork_exec", "system", "posix_spawn", "posix_spawnp", "fork"})


class Checked(Protocol):
    """The run being checked (a `Replay`)."""

    @property
    def replaying(self) -> bool:
        """Whether the run is still before the question the last round asked."""

    @property
    def label(self) -> str:
        """The request, as logs name it."""


class Watch:
    """One checked run: what it was warned about, and sqlite calls in progress."""

    __slots__ = ("changes", "run", "warned")

    def __init__(self, run: Checked) -> None:
        self.run = run
        self.warned: set[str] = set()
        self.changes: list[int] = []

    def warn(self, what: str) -> None:
        """Log `what` once per run, with the fix."""
        if what in self.warned or not self.run.replaying:
            return
        self.warned.add(what)
        logger.warning(
            "%s: %s before the question the last round asked; on a 2026-07-28 request the "
            "code before a question runs again on every round, so this happens again each "
            "round: move it after the questions, or into ctx.once(key, fn), which runs fn "
            "once and gives its result back on later rounds",
            self.run.label,
            what,
        )


#: The checked run of the current task (None: not checked, or inside `ctx.once`).
_WATCH: contextvars.ContextVar[Watch | None] = contextvars.ContextVar(
    "mrtr_replay_check", default=None
)
_installed = threading.local()  # per thread: how many checked runs replay on it now


def start(run: Checked) -> contextvars.Token[Watch | None] | None:
    """Watch `run` (in the calling task) while it replays; None if a profiler is in the way."""
    depth = getattr(_installed, "depth", 0)
    if depth == 0:
        if sys.getprofile() is not None:
            return None  # someone else profiles this thread: theirs wins, no check
        sys.setprofile(_profile)
    _installed.depth = depth + 1
    return _WATCH.set(Watch(run))


def stop(token: contextvars.Token[Watch | None]) -> None:
    """End the watch `start` began."""
    _WATCH.reset(token)
    _installed.depth -= 1
    if _installed.depth == 0 and sys.getprofile() is _profile:
        sys.setprofile(None)


def pause() -> contextvars.Token[Watch | None] | None:
    """Stop watching the current task for a while (inside `ctx.once`); give it to `resume`."""
    if _WATCH.get() is None:
        return None
    return _WATCH.set(None)


def resume(token: contextvars.Token[Watch | None] | None) -> None:
    """Undo `pause`."""
    if token is not None:
        _WATCH.reset(token)


def _profile(frame: FrameType, event: str, arg: Any) -> None:
    if event != "c_call" and event != "c_return" and event != "c_exception":
        return
    watch = _WATCH.get()
    if watch is None:
        return
    try:
        _look(watch, event, arg)
    except Exception:
        # A check must never break the code it watches (and an error raised here would make
        # Python drop the hook): a closed sqlite3 connection refuses `total_changes`, for one.
        return


def _look(watch: Watch, event: str, arg: Any) -> None:
    """Note what the C call `arg` does (`event`: its start, return or exception)."""
    owner = getattr(arg, "__self__", None)
    if owner is None:
        return
    name: str = getattr(arg, "__name__", "")
    kind = type(owner)
    if kind.__module__ == "sqlite3" and name in _SQLITE_CALLS:
        connection = getattr(owner, "connection", owner)  # a cursor's connection, or itself
        if event == "c_call":
            watch.changes.append(connection.total_changes)
        elif watch.changes and connection.total_changes != watch.changes.pop():
            watch.warn(f"changed rows of a SQLite database (sqlite3 {kind.__name__}.{name})")
        return
    if event != "c_call":
        return
    if isinstance(owner, socket.socket) and name in _SOCKET_CALLS:
        watch.warn(f"did network I/O (socket.{name})")
    elif kind.__module__ == "_io" and name in _FILE_CALLS and _writes_a_file(owner):
        watch.warn(f"wrote to the file {owner.name!r}")
    elif isinstance(owner, ModuleType):
        if owner.__name__ in ("posix", "nt") and name in _FS_CALLS:
            watch.warn(f"changed the file system (os.{name})")
        elif name in _PROCESS_CALLS and owner.__name__ in ("posix", "nt", "_posixsubprocess"):
            watch.warn("started a process")


def _writes_a_file(stream: Any) -> bool:
    # The standard streams are not effects on the world a later round could repeat.
    if stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        return False
    return isinstance(getattr(stream, "name", None), str)
