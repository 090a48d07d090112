"""URI templates (RFC 6570) for resource templates: expansion-free matching of `{var}`.

Supports simple `{var}` (one path segment), reserved `{+var}` (may span `/`) and lists like
`{a,b}` separated by commas, which is what resource templates use in practice.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

_EXPR = re.compile(r"\{([+#]?)([A-Za-z0-9_.,]+)\}")


class UriTemplate:
    """A compiled template; `match(uri)` gives its variables or None."""

    __slots__ = ("_regex", "template", "variables")

    def __init__(self, template: str) -> None:
        self.template = template
        pattern: list[str] = []
        names: list[str] = []
        pos = 0
        for m in _EXPR.finditer(template):
            pattern.append(re.escape(template[pos : m.start()]))
            operator, var_list = m.group(1), m.group(2).split(",")
            part = ".+?" if operator else "[^/?#]+"
            groups = []
            for var in var_list:
                if not var.isidentifier() or var in names:
                    raise ValueError(
                        f"bad or repeated variable {var!r} in URI template {template!r}"
                    )
                names.append(var)
                groups.append(f"(?P<{var}>{part})")
            pattern.append(",".join(groups))
            pos = m.end()
        pattern.append(re.escape(template[pos:]))
        self._regex = re.compile("".join(pattern) + r"\Z")
        self.variables: tuple[str, ...] = tuple(names)

    def match(self, uri: str) -> dict[str, str] | None:
        """The variables of `uri` (percent-decoded) when it fits the template."""
        m = self._regex.match(uri)
        if m is None:
            return None
        return {k: unquote(v) for k, v in m.groupdict().items()}
