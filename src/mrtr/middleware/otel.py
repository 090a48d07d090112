"""`OpenTelemetryMiddleware`: a server span per request (the optional `otel` extra)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..protocol.errors import McpError
from ..server.middleware import CallNext, is_mrtr_method, request_target

if TYPE_CHECKING:
    from ..server.context import RequestContext

_TARGET_ATTRIBUTE = {
    "tools/call": "gen_ai.tool.name",
    "prompts/get": "gen_ai.prompt.name",
    "resources/read": "mcp.resource.uri",
    "resources/subscribe": "mcp.resource.uri",
    "resources/unsubscribe": "mcp.resource.uri",
}


class OpenTelemetryMiddleware:
    """Runs each request in a `SERVER` span named `"{method} {target}"` (or just the method).

    Attributes: `mcp.method.name`, `jsonrpc.request.id`, `mcp.protocol.version`, the target
    (`gen_ai.tool.name`, `gen_ai.prompt.name` or `mcp.resource.uri`), and for the MRTR methods
    `mcp.round`, `mcp.flow.id` and `mcp.replaying`; once answered `mcp.result.type`
    (`complete`/`input_required`), `mcp.tool.is_error` for a tool error, or for an `McpError`
    `rpc.jsonrpc.error_code` with the span status set to ERROR. The rounds of one flow share
    `mcp.flow.id`, which ties their spans together.

    Needs `opentelemetry-api` (`pip install "mrtr[otel]"`): without it, constructing this is
    an `ImportError` saying so. `tracer_provider` defaults to the global one.
    """

    def __init__(self, tracer_provider: Any = None, *, tracer_name: str = "mrtr") -> None:
        try:
            from opentelemetry import trace
        except ImportError as exc:
            raise ImportError(
                "OpenTelemetryMiddleware needs the OpenTelemetry API: "
                'pip install "mrtr[otel]" (or opentelemetry-api)'
            ) from exc
        self._trace = trace
        from .. import __version__

        self.tracer = trace.get_tracer(tracer_name, __version__, tracer_provider=tracer_provider)

    async def __call__(self, ctx: RequestContext, call_next: CallNext) -> dict[str, Any]:
        trace = self._trace
        method = ctx.method
        target = request_target(ctx)
        attributes: dict[str, Any] = {"mcp.method.name": method}
        request_id = ctx.request_id
        if request_id is not None:
            attributes["jsonrpc.request.id"] = str(request_id)
        version = ctx.protocol_version
        if isinstance(version, str):
            attributes["mcp.protocol.version"] = version
        if target is not None:
            attributes[_TARGET_ATTRIBUTE.get(method, "mcp.target")] = target
        mrtr = is_mrtr_method(method)
        if mrtr:
            attributes["mcp.round"] = ctx.round
            attributes["mcp.replaying"] = ctx.replaying
        name = f"{method} {target}" if target is not None else method
        with self.tracer.start_as_current_span(
            name, kind=trace.SpanKind.SERVER, attributes=attributes
        ) as span:
            try:
                result = await call_next(ctx)
            except McpError as exc:
                span.set_attribute("rpc.jsonrpc.error_code", exc.code)
                span.set_status(trace.Status(trace.StatusCode.ERROR, exc.message))
                raise
            finally:
                if mrtr:
                    # Read once the round has run: a first round's flow id exists only if the
                    # handler (or another middleware) needed one, or it asked the client.
                    flow = ctx.engine.state.flow_id
                    if flow:
                        span.set_attribute("mcp.flow.id", flow)
            result_type = result.get("resultType")
            # The server adds `resultType: complete` after the middleware (and legacy results
            # have none): what is not input-required is complete.
            span.set_attribute(
                "mcp.result.type", result_type if isinstance(result_type, str) else "complete"
            )
            if result.get("isError") is True:
                span.set_attribute("mcp.tool.is_error", True)
                span.set_status(trace.Status(trace.StatusCode.ERROR, "tool error"))
            return result
