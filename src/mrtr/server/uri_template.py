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
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote

logger = logging.getLogger("mrtr.server")

_EXPR = re.compile(r"\{([^{}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUERY_OPERATORS = ("?", "&")
# What one variable of each operator may match, before decoding.
_PART = {
    "": r"[^/?#]+",
    "+": r"[^?#]+?",
    "#": r".+?",
    ".": r"[^/?#.]+",
    "/": r"[^/?#]+",
}
_PREFIX = {"": "", "+": "", "#": "#", ".": r"\.", "/": "/"}
_SPANS_SLASH = frozenset(("+", "#"))
_DOT_SEGMENTS = frozenset((".", ".."))
# A Windows drive (`C:`, `c:foo`): joined to a root, it replaces the root.
_DRIVE = re.compile(r"[A-Za-z]:")


def has_expressions(uri: str) -> bool:
    """Whether `uri` holds a `{...}` expression, so that it is a template and not one URI."""
    return _EXPR.search(uri) is not None


class UriTemplate:
    """A compiled template; `match(uri)` gives its variables or None."""

    __slots__ = ("_groups", "_query", "_regex", "template", "variables")

    def __init__(self, template: str) -> None:
        self.template = template
        pattern: list[str] = []
        names: list[str] = []
        # Each path variable: its regex group, and whether its value may span `/`. Groups are
        # numbered, so no variable name can collide with one of ours.
        self._groups: list[tuple[str, str, bool]] = []
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
            pattern.append(re.escape(template[pos : m.start()]))
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
            groups = []
            for name, explode in variables:
                if explode and operator != "/":
                    raise ValueError(
                        f"URI template {template!r}: '*' is supported only as {{/{name}*}}"
                    )
                part = r"[^?#]+?" if explode else _PART[operator]
                if len(variables) > 1:  # values of a list are separated by commas
                    part = part.replace("]", ",]", 1) if part.startswith("[") else r"[^,]+?"
                group = f"g{len(self._groups)}"
                self._groups.append((name, group, operator in _SPANS_SLASH or explode))
                groups.append(f"{_PREFIX[operator]}(?P<{group}>{part})")
            pattern.append(("," if operator in ("", "+", "#") else "").join(groups))
        if self._query and template[pos:]:
            raise ValueError(
                f"URI template {template!r}: a query expression ({{?...}} or {{&...}}) must "
                "come last"
            )
        pattern.append(re.escape(template[pos:]))
        if self._query:
            pattern.append(r"(?:\?(?P<q>[^#]*))?")
        self._regex = re.compile("".join(pattern) + r"\Z")
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
        found = self._match(uri)
        return found if isinstance(found, dict) else None

    def refusal(self, uri: str) -> str | None:
        """Why `uri` does not fit although it has the template's shape (a value that would
        escape its place), else None."""
        found = self._match(uri)
        return found if isinstance(found, str) else None

    def _match(self, uri: str) -> dict[str, str] | str | None:
        m = self._regex.match(uri)
        if m is None:
            return None
        found: dict[str, str] = {}
        for name, group, spans_slash in self._groups:
            value = _decoded(m.group(group), spans_slash)
            if not isinstance(value, tuple):
                logger.debug("refused %r for template %r: unsafe %r", uri, self.template, name)
                return f"the value of {name!r} {value}"
            found[name] = value[0]
        if self._query:
            query = _query_values(m.group("q"), self._query)
            if isinstance(query, str):
                logger.debug("refused %r for template %r: %s", uri, self.template, query)
                return query
            if query is None:
                return None
            found.update(query)
        return found


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
