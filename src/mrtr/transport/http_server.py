"""Streamable HTTP, server side: the ASGI app and the ways to run it, in one place to import.

The parts: `http_app.py` (`StreamableHTTPApp`: routing, the checks in order, the body, the
era of each request), `http_checks.py` (the header checks and their caches),
`http_exchange.py` (one request's response, JSON or SSE), `http_serve.py` (`serve_http`
under uvicorn, `worker_app` and `worker_protocol` for worker processes), `http_legacy.py`
(legacy sessions) and `http_sse.py` (the HTTP+SSE transport of 2024-11-05).
"""

from __future__ import annotations

from .http_app import StreamableHTTPApp
from .http_legacy import close_sse_stream
from .http_serve import serve_http, worker_app, worker_protocol

__all__ = ["StreamableHTTPApp", "close_sse_stream", "serve_http", "worker_app", "worker_protocol"]
