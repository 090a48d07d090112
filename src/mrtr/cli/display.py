"""What a server wrote, made safe for a person to read at a terminal.

A server is not trusted with the terminal: a control sequence in a message it sends could move
the cursor, rewrite a line the command printed ("The server (...) asks:"), clear the screen,
write the clipboard (OSC 52) or plant a hidden link (OSC 8); a bidi override could make text
read in another order than it is. So every string that comes from a server (or its process)
passes through this module before it is written for a person.

Rules:
* `shown` escapes every C0 control but newline and tab, DEL, every C1 control, the Unicode
  bidi controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069), the line and paragraph
  separators (U+2028, U+2029) and lone surrogates (which no terminal encoding can write): each
  becomes a visible escape (`\\x1b`, `\\x9b`, `\\u202e`), so nothing is hidden and nothing acts.
* `shown_line` does the same for text that must stay on one line (a title, a label, a URL, a
  status): a newline is escaped too.
* `indented` shows server text under a line of the command's own, every line of it indented,
  so that a server's line can never start at the margin where the command's lines start.
* `shown_json` makes JSON text safe the JSON way: the same characters become `\\uXXXX`
  escapes, so `--json` output still parses to the same value.
"""

from __future__ import annotations

import re

__all__ = ["indented", "shown", "shown_json", "shown_line"]

_UNSAFE_CLASS = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 but \t and \n, DEL, C1
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidi marks, embeddings, overrides, isolates
    "\u2028\u2029"  # line and paragraph separators
    "\ud800-\udfff"  # lone surrogates (a JSON string may carry one)
)
_UNSAFE = re.compile(f"[{_UNSAFE_CLASS}]")
_UNSAFE_OR_NEWLINE = re.compile(f"[{_UNSAFE_CLASS}\n]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def shown(text: str) -> str:
    """`text` with every character that could act on a terminal shown as an escape."""
    return _UNSAFE.sub(_escape, text)


def shown_line(text: str) -> str:
    """`text` as one line: as `shown`, and a newline escaped too."""
    return _UNSAFE_OR_NEWLINE.sub(_escape, text)


def indented(text: str, prefix: str = "  ") -> str:
    """`text` shown (`shown`) with `prefix` before each of its lines."""
    return "\n".join(prefix + line for line in shown(text).split("\n"))


def shown_json(text: str) -> str:
    """JSON text with the characters `shown` escapes written as JSON `\\uXXXX` escapes.

    Outside its strings JSON is plain ASCII, so only string contents change, and they decode
    to the same value.
    """
    return _UNSAFE.sub(_json_escape, text)
