"""OpenTelemetry traces, sent to an OTLP/HTTP collector (off unless `otlp_endpoint` is set).

One server span per request, from its arrival to the end of its answer, and under it a client
span per attempt to reach the upstream (a retry is a second one), from sending the request to
the end of the upstream's answer. Attributes follow the OpenTelemetry GenAI semantic
conventions as of opentelemetry-semantic-conventions 0.66b2, where `gen_ai.provider.name`
replaced `gen_ai.system`; the provider named is the upstream's configured name, since behind
an OpenAI-compatible API the gateway cannot tell who serves it.

The attempt spans come through the request's scope (backends/scope.py: `attempts`, set when a
request starts): backends import nothing of OpenTelemetry, and with traces off nothing here is
imported.
Each app has its own tracer provider (not the process-wide one): several apps live in one test
process, and the provider is shut down, its last spans sent, with the app.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from codexgate import __version__
from codexgate.backends import scope
from codexgate.server.exchange import Exchange
from codexgate.server.observe import Observer

__all__ = ["Tracing", "traces_url"]

_MAX_NAME_CHARS = 80  # a span name carries the client's model name: cut like a log value


def traces_url(endpoint: str) -> str:
    """The collector's traces URL: `endpoint` as given when it ends with /v1/traces, else
    with it appended (as OTEL_EXPORTER_OTLP_ENDPOINT is read)."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


class Tracing(Observer):
    """Spans of each request and its upstream attempts, handed to `processor`."""

    def __init__(self, processor: SpanProcessor, service_name: str = "codexgate") -> None:
        resource = Resource.create({"service.name": service_name, "service.version": __version__})
        # shutdown_on_exit=False: the app shuts it down (aclose), and an atexit hook per app
        # would pile up in a process that builds many.
        self.provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        self.provider.add_span_processor(processor)
        self._tracer = self.provider.get_tracer("codexgate", __version__)
        # Requests started and not yet finished, by id(exchange): finished always follows
        # started in the same task, so an id is not reused while it is here.
        self._open: dict[int, _RequestTrace] = {}

    @classmethod
    def otlp(cls, endpoint: str, service_name: str = "codexgate") -> Tracing:
        """Spans batched and sent to the OTLP/HTTP collector at `endpoint` (headers, such as a
        vendor's key, from OTEL_EXPORTER_OTLP_HEADERS)."""
        return cls(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(endpoint))), service_name)

    def started(self, exchange: Exchange) -> None:
        req = exchange.req
        model = str(exchange.model or "")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.provider.name": exchange.upstream or "",
            "codexgate.face": exchange.face or "",
        }
        for name, value in (
            ("gen_ai.request.max_tokens", getattr(req, "max_output_tokens", None)),
            ("gen_ai.request.temperature", getattr(req, "temperature", None)),
            ("gen_ai.request.top_p", getattr(req, "top_p", None)),
            ("codexgate.request_id", exchange.request_id),
        ):
            if value is not None:
                attributes[name] = value
        span = self._tracer.start_span(
            f"chat {model[:_MAX_NAME_CHARS]}".rstrip(),
            kind=SpanKind.SERVER,
            attributes=attributes,
            start_time=int(exchange.wall_start * 1e9),  # the request's arrival, before its body was read
        )
        request = _RequestTrace(self._tracer, span)
        self._open[id(exchange)] = request
        scope.current().attempts = request

    def finished(self, exchange: Exchange) -> None:
        request = self._open.pop(id(exchange), None)
        if request is None:
            return  # refused before it was routed: no span
        span = request.span
        resource = (exchange.terminal or {}).get("response") or {}
        usage = exchange.usage or {}
        cached = (usage.get("input_tokens_details") or {}).get("cached_tokens")
        reasoning = (usage.get("output_tokens_details") or {}).get("reasoning_tokens")
        for name, value in (
            ("gen_ai.response.id", exchange.response_id),
            ("gen_ai.response.model", resource.get("model")),
            ("gen_ai.usage.input_tokens", usage.get("input_tokens")),
            ("gen_ai.usage.output_tokens", usage.get("output_tokens")),
            ("gen_ai.usage.cache_read.input_tokens", cached),
            ("gen_ai.usage.reasoning.output_tokens", reasoning),
            ("http.response.status_code", exchange.status),
            ("codexgate.outcome", exchange.outcome),
        ):
            if value is not None:
                span.set_attribute(name, value)
        error, ours = _error_type(exchange)
        if error is not None:
            span.set_attribute("error.type", error)
            if ours:
                span.set_status(Status(StatusCode.ERROR, error))
        request.end(error)

    async def aclose(self) -> None:
        """Send what is left and stop (the exporter blocks: in a thread, off the event loop)."""
        await asyncio.to_thread(self.provider.shutdown)


def _error_type(exchange: Exchange) -> tuple[str | None, bool]:
    """The error's code, for `error.type` (None: the request did not fail), and whether the
    gateway or its upstream failed, which makes the span's status an error. A client's mistake
    (a 4xx) or its leaving is not, as in the HTTP server conventions."""
    outcome = exchange.outcome or ""
    status = exchange.status or 0
    if outcome.startswith("failed"):
        return outcome.partition(":")[2] or "failed", True
    if status >= 400:
        return outcome or str(status), status >= 500
    if outcome == "client_gone":
        return outcome, False
    return None, False


class _RequestTrace:
    """One request's span and its attempts' (the AttemptWatcher of backends/scope.py)."""

    __slots__ = ("_attempts", "_context", "_tracer", "span")

    def __init__(self, tracer: trace.Tracer, span: Span) -> None:
        self._tracer = tracer
        self.span = span
        self._context = trace.set_span_in_context(span)
        self._attempts: list[_AttemptSpan] = []

    def attempt(self, upstream: str, url: str, number: int) -> _AttemptSpan:
        parts = urlsplit(url)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": upstream,
            "http.request.method": "POST",
            "server.address": parts.hostname or "",
            "url.path": parts.path,
            "codexgate.attempt": number,
        }
        if parts.port is not None:
            attributes["server.port"] = parts.port
        if number:
            attributes["http.request.resend_count"] = number
        span = self._tracer.start_span(
            f"upstream {upstream}", context=self._context, kind=SpanKind.CLIENT, attributes=attributes
        )
        attempt = _AttemptSpan(span)
        self._attempts.append(attempt)
        return attempt

    def end(self, error: str | None) -> None:
        """End the request's span, and any attempt still open (the client left while the
        upstream was answering): it ended with the request."""
        for attempt in self._attempts:
            attempt.end(None, error or "unfinished")
        self.span.end()


class _AttemptSpan:
    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span: Span | None = span

    def end(self, status: int | None = None, error: str | None = None) -> None:
        span = self._span
        if span is None:
            return
        self._span = None
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=time.time_ns())
