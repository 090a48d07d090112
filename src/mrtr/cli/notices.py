"""What a server reports while `mrtr call` runs: progress and log messages, shown on stderr.

Progress is one line: on a terminal it is rewritten in place (`\\r`) as reports come, and ended
before anything else is written; elsewhere (a file, a pipe) each report is a line of its own.
Log messages are lines `server log [level] logger: message`.

Rules:
* What the server wrote (a progress message, a log level, logger name and message) is shown
  through `display.shown_line`: one line, no control sequence of its own.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from .display import shown_line

#: Characters of the progress bar.
BAR_WIDTH = 24


def progress_text(progress: float, total: float | None, message: str | None) -> str:
    """A progress report as text: a bar and `done/total` when the total is known."""
    said = f"  {shown_line(message)}" if message else ""
    if total is not None and total > 0:
        filled = round(BAR_WIDTH * min(max(progress / total, 0.0), 1.0))
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        return f"progress [{bar}] {progress:g}/{total:g}{said}"
    return f"progress {progress:g}{said}"


class Notices:
    """Shows progress reports and log messages on `stream` (default: stderr)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        try:
            self._in_place = self._stream.isatty()
        except (AttributeError, ValueError):
            self._in_place = False
        self._open = False  # a progress line is shown without its line break

    def progress(self, progress: float, total: float | None, message: str | None) -> None:
        """A progress callback (`Client.call_tool(progress_callback=...)`)."""
        text = progress_text(progress, total, message)
        if self._in_place:
            self._stream.write("\r\x1b[K" + text)  # back to the start, clear, rewrite
            self._open = True
            if total is not None and progress >= total:
                self.end_line()
        else:
            self._stream.write(text + "\n")
        self._stream.flush()

    def log(self, params: dict[str, Any]) -> None:
        """A log handler (`Client(log_handler=...)`): one `notifications/message`."""
        self.end_line()
        level = params.get("level", "info")
        name = params.get("logger")
        data = params.get("data")
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        source = f" {shown_line(name)}:" if isinstance(name, str) and name else ""
        said = shown_line(f"[{level}]{source} {text}")
        self._stream.write(f"server log {said}\n")
        self._stream.flush()

    def end_line(self) -> None:
        """End a progress line left open, before something else is written."""
        if self._open:
            self._stream.write("\n")
            self._stream.flush()
            self._open = False


__all__ = ["BAR_WIDTH", "Notices", "progress_text"]
