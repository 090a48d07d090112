"""URI templates (RFC 6570) for resource templates: matching a URI back to its variables.

Supported expressions, each with one or more comma-separated variables:

* `{var}` — simple: one path segment (no `/`, `?` or `#`);
* `{+var}` — reserved: may span `/` (a path under a root), not `?` or `#`;
* `{#var}` — fragment: `#` then anything;
* `{.var}` — label: `.` then one label (`{.ext}`);
* `{/var}` — one path segment after a `/`; `{/var*}` — one or more segments;
* `{?var}` and `{&var}` — query parameters `var=value`, in any order, each optional; these come
  last in the template.

Anything else (`{;var}`, prefix modifiers such as `{var:3}`, a query expression before the
end) is refused when the template is registered, so a template never silently matches nothing.

Matched values are percent-decoded, and a value that would escape its place is refused (the URI
does not match), in every kind of expression, query values included. Once decoded, no value
holds a backslash (a path separator to some file APIs) or a NUL, no path segment is `.` or `..`,
and no value starts with a drive (`C:`); a value that may not span `/` (`{var}`, `{.var}`,
`{/var}`, `{?var}`, `{&var}`) holds none (`%2F` included), and one that may (`{+var}`,
`{#var}`, `{/var*}`) has no empty segment, so it never starts with `/` (`file:///docs//etc`
would make `Path(root) / path` absolute). So `file:///docs/{path}` never hands
`../../etc/passwd` to its handler, and `{+path}` never climbs out of the root it follows.

Rules of matching (no regular expression, nothing tried twice, so a URI costs time linear in
its length whatever the template; `Registry` matches none longer than `MAX_URI_LENGTH`):

1. A template is a sequence of literals (an expression's `#`, `.`, `/` and list commas
   included) and variables, then the query expressions if any. A variable's raw value is a
   non-empty run of characters other than its stops: `/`, `?`, `#` for `{var}` and `{/var}`
   (and `.` for `{.var}`); `?`, `#` for `{+var}` and `{/var*}`; a line break for `{#var}`. In a
   list (`{a,b}`) a comma is a stop too, and the only one of `{#a,b}`.
2. Where a variable could end in several places (`repo://{+owner}/{+path}`: at any `/`),
   `{+var}`, `{#var}` and `{/var*}` take the shortest extent, every other the longest, among
   those after which the rest of the template can still match the rest of the URI. One pass
   from the URI's end marks, for each step of the template, the positions from which the
   steps after it can match; one pass from the start then places each variable.
3. The query, when the template has one, is everything after the `?` that follows the last
   variable, and holds no `#`.
4. Matching and refusing are one pass (`resolve`): a URI of the template's shape whose value
   would escape its place gives the reason, any other the variables or None.
"""

from __future__ import annotations

import bisect
import logging
import re
from typing import Final, NamedTuple
from urllib.parse import unquote

logger = logging.getLogger("mrtr.server")

#: The longest URI (in characters) a `resources/read` matches against resource templates.
MAX_URI_LENGTH: Final = 8192

_EXPR = re.compile(r"\{([^{}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUERY_OPERATORS = ("?", "&")
# What one variable of each operator may not hold, before decoding (rule 1). `{#var}` keeps
# the line break of the regular expression it replaced (`.` never matched one).
_STOPS = {"": "/?#", "+": "?#", "#": "\n", ".": "/?#.", "/": "/?#"}
_SHORTEST = frozenset(("+", "#"))
_PREFIX = {"": "", "+": "", "#": "#", ".": ".", "/": "/"}
_SPANS_SLASH = frozenset(("+", "#"))
_DOT_SEGMENTS = frozenset((".", ".."))
# A Windows drive (`C:`, `c:foo`): joined to a root, it replaces the root.
_DRIVE = re.compile(r"[A-Za-z]:")


def has_expressions(uri: str) -> bool:
    """Whether `uri` holds a `{...}` expression, so that it is a template and not one URI."""
    return _EXPR.search(uri) is not None


class _Variable(NamedTuple):
    """One variable's place in a template (rule 1): what ends it and which extent it takes."""

    stops: str
    shortest: bool


class UriTemplate:
    """A compiled template; `match(uri)` gives its variables or None."""

    __slots__ = ("_head", "_query", "_slots", "_steps", "_tail", "template", "variables")

    def __init__(self, template: str) -> None:
        self.template = template
        names: list[str] = []
        steps: list[str | _Variable] = []
        # Each variable, in order: its name, and whether its value may span `/`.
        self._slots: tuple[tuple[str, bool], ...] = ()
        self._query: tuple[str, ...] = ()
        pos = 0
        for m in _EXPR.finditer(template):
            body = m.group(1)
            operator = body[:1] if body[:1] in "+#./?&;=,!@|" else ""
            if self._query and (operator not in _QUERY_OPERATORS or m.start() != pos):
                raise ValueError(
                    f"URI template {template!r}: a query expression ({{?...}} or {{&...}}) must "
                    "come last"
                )
            steps.append(template[pos : m.start()])
            pos = m.end()
            specs = body[len(operator) :].split(",")
            if operator in (";", "=", ",", "!", "@", "|"):
                raise ValueError(
                    f"URI template {template!r}: the {operator!r} operator is not supported "
                    "(use {var}, {+var}, {#var}, {.var}, {/var}, {/var*}, {?var} or {&var})"
                )
            variables = [self._variable(template, spec, operator, names) for spec in specs]
            if operator in _QUERY_OPERATORS:
                if any(explode for _, explode in variables):
                    raise ValueError(
                        f"URI template {template!r}: exploded query variables are not supported"
                    )
                self._query += tuple(name for name, _ in variables)
                continue
            listed = len(variables) > 1
            for at, (name, explode) in enumerate(variables):
                if explode and operator != "/":
                    raise ValueError(
                        f"URI template {template!r}: '*' is supported only as {{/{name}*}}"
                    )
                stops = "?#" if explode else _STOPS[operator]
                if listed:  # values of a list are separated by commas
                    stops = "," if operator == "#" else stops + ","
                # Each value has its prefix (`{/a,b}` is `/1/2`, `{#a,b}` is `#1,#2`); those of
                # `{a,b}`, `{+a,b}` and `{#a,b}` are separated by commas.
                if at and operator in ("", "+", "#"):
                    steps.append(",")
                steps.append(_PREFIX[operator])
                steps.append(_Variable(stops, explode or operator in _SHORTEST))
                self._slots += ((name, operator in _SPANS_SLASH or explode),)
        if self._query and template[pos:]:
            raise ValueError(
                f"URI template {template!r}: a query expression ({{?...}} or {{&...}}) must "
                "come last"
            )
        steps.append(template[pos:])
        merged: list[str | _Variable] = []
        for step in steps:  # adjacent literals as one; no empty ones
            if isinstance(step, str) and merged and isinstance(merged[-1], str):
                merged[-1] += step
            elif step != "":
                merged.append(step)
        # A leading literal is checked as a prefix, a trailing one (without a query) as a
        # suffix: most URIs another template serves are refused by these alone.
        first = merged[0] if merged else None
        self._head = first if isinstance(first, str) else ""
        if self._head:
            merged.pop(0)
        last = merged[-1] if merged and not self._query else None
        self._tail = last if isinstance(last, str) else ""
        if self._tail:
            merged.pop()
        self._steps: tuple[str | _Variable, ...] = tuple(merged)
        self.variables: tuple[str, ...] = tuple(names)

    @staticmethod
    def _variable(template: str, spec: str, operator: str, names: list[str]) -> tuple[str, bool]:
        explode = spec.endswith("*")
        name = spec[:-1] if explode else spec
        if ":" in name:
            raise ValueError(
                f"URI template {template!r}: prefix modifiers ({{{name}}}) are not supported"
            )
        if not _NAME.fullmatch(name) or name in names:
            raise ValueError(f"bad or repeated variable {name!r} in URI template {template!r}")
        names.append(name)
        return name, explode

    def match(self, uri: str) -> dict[str, str] | None:
        """The variables of `uri` (percent-decoded) when it fits the template, else None.

        A URI whose value would escape its place (see the module docstring) does not fit.
        """
        found = self.resolve(uri)
        return found if isinstance(found, dict) else None

    def refusal(self, uri: str) -> str | None:
        """Why `uri` does not fit although it has the template's shape (a value that would
        escape its place), else None."""
        found = self.resolve(uri)
        return found if isinstance(found, str) else None

    def resolve(self, uri: str) -> dict[str, str] | str | None:
        """`match` and `refusal` in one pass (rule 4): the variables, the reason a URI of the
        template's shape is refused, or None for a URI of another shape."""
        raw = self._raw_values(uri)
        if raw is None:
            return None
        values, query = raw
        found: dict[str, str] = {}
        for (name, spans_slash), text in zip(self._slots, values, strict=True):
            value = _decoded(text, spans_slash)
            if not isinstance(value, tuple):
                logger.debug("refused %r for template %r: unsafe %r", uri, self.template, name)
                return f"the value of {name!r} {value}"
            found[name] = value[0]
        if self._query:
            given = _query_values(query, self._query)
            if isinstance(given, str):
                logger.debug("refused %r for template %r: %s", uri, self.template, given)
                return given
            if given is None:
                return None
            found.update(given)
        return found

    def _raw_values(self, uri: str) -> tuple[list[str], str | None] | None:
        """Each variable's raw value and the query (None without one), by rules 1-3; None when
        `uri` does not have the template's shape."""
        head, tail = self._head, self._tail
        if not uri.startswith(head) or not uri.endswith(tail):
            return None
        start, end = len(head), len(uri) - len(tail)
        if end < start:
            return None
        steps = self._steps
        # Where the query may start (rule 3), or the end.
        after = bytearray(end + 1)
        after[end] = 1
        if self._query:
            at = uri.find("?", max(start, uri.rfind("#", start, end) + 1), end)
            while at != -1:
                after[at] = 1
                at = uri.find("?", at + 1, end)
        # reach[k] marks the positions from which steps k+1... (and the query) can match.
        reach = [after]
        stops_of: dict[str, list[int]] = {}
        for step in reversed(steps[1:]):
            reach.append(_reachable(uri, start, end, step, reach[-1], stops_of))
        reach.reverse()
        pos = start
        values: list[str] = []
        for step, ahead in zip(steps, reach[: len(steps)], strict=True):
            if isinstance(step, str):
                if not uri.startswith(step, pos, end) or not ahead[pos + len(step)]:
                    return None
                pos += len(step)
                continue
            stops = _stop_positions(uri, start, end, step.stops, stops_of)
            stop = stops[bisect.bisect_left(stops, pos)]  # where this variable's run ends
            found = (ahead.find if step.shortest else ahead.rfind)(1, pos + 1, stop + 1)
            if found == -1:
                return None
            values.append(uri[pos:found])
            pos = found
        if pos == end:
            return values, None
        if not after[pos]:
            return None
        return values, uri[pos + 1 : end]


def _stop_positions(
    uri: str, start: int, end: int, stops: str, cache: dict[str, list[int]]
) -> list[int]:
    """The positions in uri[start:end] of the characters in `stops`, ascending, then `end`."""
    positions = cache.get(stops)
    if positions is None:
        positions = []
        for char in stops:
            at = uri.find(char, start, end)
            while at != -1:
                positions.append(at)
                at = uri.find(char, at + 1, end)
        positions.sort()
        positions.append(end)
        cache[stops] = positions
    return positions


def _reachable(
    uri: str,
    start: int,
    end: int,
    step: str | _Variable,
    ahead: bytearray,
    cache: dict[str, list[int]],
) -> bytearray:
    """The positions from which `step`, then what `ahead` marks, can match (rule 2).

    A literal reaches from each of its occurrences followed by a marked position. A variable
    reaches from every position of a run of non-stops up to the last marked position within
    the run (its end included): one search and one slice per run.
    """
    here = bytearray(len(ahead))
    if isinstance(step, str):
        size = len(step)
        at = uri.find(step, start, end)
        while at != -1:
            if ahead[at + size]:
                here[at] = 1
            at = uri.find(step, at + 1, end)
        return here
    run = start
    for stop in _stop_positions(uri, start, end, step.stops, cache):
        if stop > run:
            last = ahead.rfind(1, run + 1, stop + 1)
            if last != -1:
                here[run:last] = b"\x01" * (last - run)
        run = stop + 1
    return here


def _decoded(raw: str, spans_slash: bool) -> tuple[str] | str:
    """`raw` percent-decoded (in a 1-tuple), or why it would escape its place."""
    segments = raw.split("/") if spans_slash else [raw]
    decoded = []
    for segment in segments:
        text = unquote(segment)
        if spans_slash and not text:
            return "has an empty path segment (a leading or doubled '/')"
        if "/" in text:
            return "holds a '/' (encoded as %2F)"
        if text in _DOT_SEGMENTS:
            return f"holds a {text!r} path segment"
        if "\\" in text:
            return "holds a backslash"
        if "\x00" in text:
            return "holds a NUL character"
        decoded.append(text)
    if _DRIVE.match(decoded[0]):
        return "starts with a drive (an absolute path)"
    return ("/".join(decoded),)


def _query_values(query: str | None, names: tuple[str, ...]) -> dict[str, str] | str | None:
    """The template's query variables found in `query`; None if it holds another key or one
    twice (a URI the template could not have produced); why, if a value would escape its place
    (checked as a `{var}` value is; an empty value is allowed)."""
    if not query:
        return {}
    values: dict[str, str] = {}
    for pair in query.split("&"):
        key, sep, value = pair.partition("=")
        name = unquote(key)
        if not sep or name not in names or name in values:
            return None
        if not value:
            values[name] = ""
            continue
        decoded = _decoded(value, spans_slash=False)
        if not isinstance(decoded, tuple):
            return f"the value of {name!r} {decoded}"
        values[name] = decoded[0]
    return values
