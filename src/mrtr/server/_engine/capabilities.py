"""What a request may ask its client: only what the client declared it can answer.

A module of its own, below the questions and the askers that use it, so that asking a question
live never calls back into the module of the question being awaited.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from ...inputs import INPUT_METHODS
from ...protocol.errors import INTERNAL_ERROR, McpError, missing_client_capability

logger = logging.getLogger("mrtr.server")

#: A question as it was asked: `(method, params, digest)`.
Asked = tuple[str, dict[str, Any], str]

#: Questions by key, as `(method, params)` or as `(method, params, digest)` (`Asked`).
AskedQuestions = Mapping[str, tuple[str, dict[str, Any]] | Asked]


class Capable(Protocol):
    """The request as the capability check sees it (`RequestContext` is one)."""

    method: str

    def client_supports(self, method: str, *, url_mode: bool = False) -> bool:
        """Whether the client declared the capability an input request of `method` needs."""


def require_capabilities(ctx: Capable, questions: AskedQuestions) -> None:
    """Never ask what the client did not declare it can answer: -32021 instead."""
    missing: dict[str, Any] = {}
    for key, question in questions.items():
        method = question[0]
        params = question[1]
        if method not in INPUT_METHODS:
            logger.error("handler asked %r with unsupported method %r", key, method)
            raise McpError(INTERNAL_ERROR, f"Internal error while handling {ctx.method}")
        url_mode = params.get("mode") == "url"
        if not ctx.client_supports(method, url_mode=url_mode):
            needed = missing.setdefault(method.split("/")[0], {})
            if method == "elicitation/create":
                needed["url" if url_mode else "form"] = {}
    if missing.get("elicitation") == {"form": {}}:
        missing["elicitation"] = {}  # form alone is spelled `{}`, as in the spec's example
    if missing:
        raise missing_client_capability(missing)


__all__ = ["Asked", "AskedQuestions", "Capable", "require_capabilities"]
