"""A proxy's backend failures as its callers hear of them, and as its log keeps them.

Rules:

1. A caller is told of a backend failure with a short random incident id and a neutral name:
   "the backend", or the name its `serverInfo` gave (`Incidents.name`). Never its command,
   arguments, environment, a path, a pid, or its URL: the error's message and `data` carry
   only that name, the id, and what the caller needs to act (`mayHaveRun`).
2. The details (the backend as configured, what failed and the transport's own words) go to
   the `mrtr.proxy` log at warning under the same id, so an operator finds them from what a
   caller reports; the operator's own start-up error (`BackendIncident.detail`) says the same.
3. `redact` is the one redaction of text that names the backend, in every log line and
   operator message: a URL's userinfo and its query and fragment values become `***`, and so
   does the value of a flag or variable that looks secret (`--api-key=...`, `--token VALUE`,
   `API_KEY=...`) and a bearer token.
"""

from __future__ import annotations

import logging
import re
import secrets
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..protocol.errors import INTERNAL_ERROR, McpError

logger = logging.getLogger("mrtr.proxy")

#: What stands where a secret was.
MASK = "***"
#: The neutral name of a backend whose `serverInfo` is not known.
NEUTRAL = "the backend"

_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
_SECRETISH = r"(?:key|token|secret|passw(?:or)?d|passphrase|pwd|pass|auth|credential|cookie)"
_NAME = rf"[A-Za-z0-9_.-]*{_SECRETISH}[A-Za-z0-9_.-]*"
# A quoted word holding the whole flag (`'--api-key=a b'`, as `shlex.join` writes it), then a
# flag or variable with `=`, then a dashed flag followed by its value as the next word.
_QUOTED = re.compile(rf"(?i)(['\"])(-{{0,2}}{_NAME})=[^'\"]*\1")
_ASSIGNED = re.compile(rf"(?i)(?<![\w-])(-{{0,2}}{_NAME})=(?:'[^']*'|\"[^\"]*\"|[^\s'\"&]+)")
_FOLLOWED = re.compile(rf"(?i)(?<![\w-])(--?{_NAME})(\s+)(?!-)(?:'[^']*'|\"[^\"]*\"|\S+)")
_BEARER = re.compile(r"(?i)\b(bearer|dpop|basic)(\s+)[A-Za-z0-9._~+/=-]{8,}")


def redact(text: str) -> str:
    """`text` with its secrets replaced by `***` (module rule 3)."""
    text = _URL.sub(_redact_url, text)
    text = _QUOTED.sub(lambda m: f"{m[1]}{m[2]}={MASK}{m[1]}", text)
    text = _ASSIGNED.sub(lambda m: f"{m[1]}={MASK}", text)
    text = _FOLLOWED.sub(lambda m: f"{m[1]}{m[2]}{MASK}", text)
    return _BEARER.sub(lambda m: f"{m[1]}{m[2]}{MASK}", text)


def looks_secret(name: str) -> bool:
    """Whether a flag, variable or parameter `name` looks like it holds a secret (rule 3)."""
    return re.fullmatch(rf"(?i)-{{0,2}}{_NAME}", name) is not None


def _redact_url(match: re.Match[str]) -> str:
    url = match[0]
    trail = len(url) - len(url.rstrip(".,:;)]}"))
    url, tail = (url[:-trail], url[-trail:]) if trail else (url, "")
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK + tail  # not a URL it can take apart: none of it is shown
    netloc = parts.netloc
    if "@" in netloc:
        netloc = MASK + "@" + netloc.rpartition("@")[2]
    query = "&".join(_mask_pair(pair) for pair in parts.query.split("&")) if parts.query else ""
    fragment = MASK if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment)) + tail


def _mask_pair(pair: str) -> str:
    name, sep, _ = pair.partition("=")
    return f"{name}={MASK}" if sep else MASK


class BackendIncident(McpError):
    """A backend failure as its caller is told it (rule 1); `detail` is the operator's
    account of it, redacted (rule 2), and `incident` its id."""

    def __init__(self, message: str, data: dict[str, Any], incident: str, detail: str) -> None:
        super().__init__(INTERNAL_ERROR, message, data)
        self.incident = incident
        self.detail = detail


class Incidents:
    """How one backend's failures are told (the module rules); shared by its sessions.

    `describe` names the backend as configured (it is redacted before it is written).
    """

    def __init__(self, describe: str) -> None:
        self.describe = describe
        #: The backend's name as its `serverInfo` gave it, once known (rule 1).
        self.name: str | None = None

    @property
    def neutral(self) -> str:
        """The backend as a caller may hear it named."""
        return self.name or NEUTRAL

    def failure(self, what: str, why: str, told: str, **data: Any) -> BackendIncident:
        """The error a caller gets for a failure of the backend, logged with its details.

        `what` says what failed, completing "the backend X ..." for the log; `why` is the
        transport's account (logged, redacted, never told); `told` is what the caller is told
        after the backend's neutral name; `data` is added to the error's data.
        """
        incident = secrets.token_hex(4)
        detail = redact(f"{what.format(backend=self.describe)}: {why}")
        logger.warning("backend incident %s: %s", incident, detail)
        named = NEUTRAL if self.name is None else f"the backend {self.name!r}"
        message = f"{told.format(backend=named)} (incident {incident}, in the proxy's log)"
        body = {"backend": self.neutral, "incident": incident, **data}
        return BackendIncident(message, body, incident, f"{detail} (incident {incident})")


__all__ = ["MASK", "NEUTRAL", "BackendIncident", "Incidents", "looks_secret", "redact"]
