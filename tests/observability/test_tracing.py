"""OpenTelemetry traces (observability/tracing.py): a server span per request with the GenAI attributes,
a client span per upstream attempt under it, failures marked, nothing when traces are off, and
spans really sent to an OTLP/HTTP collector."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from codexgate.app import build_app
from codexgate.backends import scope
from codexgate.config import load_settings
from codexgate.observability.tracing import Tracing, traces_url
from codexgate.server.app import GatewayApp
from codexgate.server.exchange import Exchange
from codexgate.server.observe import Observer
from tests.server.test_app import UPSTREAM
from tests.support._exchange import read_body
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_upstream import FakeUpstream, Usage, cut_reply, error_reply, openai_error, text_reply
from tests.support.servers import arun_asgi_server
from tests.support.sse import sse_events


@asynccontextmanager
async def traced(
    script: Any, **settings: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, InMemorySpanExporter, GatewayApp]]:
    """The app in-process with a tracing observer that keeps its spans in memory."""
    flags = {"discover": False, "retry_backoff": 0.01, "store": "none", "upstream": UPSTREAM, **settings}
    app = build_app(
        load_settings(flags, environ={}), transport=ASGIUpstreamTransport(FakeUpstream(script)), environ={}
    )
    exporter = InMemorySpanExporter()
    tracing = Tracing(SimpleSpanProcessor(exporter))
    app.observers.add(tracing)
    try:
        async with httpx.AsyncClient(
            transport=StreamingASGITransport(app), base_url="http://gw", timeout=10
        ) as client:
            yield client, exporter, app
    finally:
        await tracing.aclose()


async def stream(client: httpx.AsyncClient, **body: Any) -> list[dict[str, Any]]:
    response = await client.post("/v1/responses", json={"model": "m", "input": "go", **body, "stream": True})
    assert response.status_code == 200, response.text
    return sse_events(response.content)


def by_kind(spans: tuple[ReadableSpan, ...], kind: SpanKind) -> list[ReadableSpan]:
    return sorted((s for s in spans if s.kind == kind), key=lambda s: s.start_time or 0)


async def test_a_request_span_with_genai_attributes_and_a_span_per_attempt() -> None:
    usage = Usage(prompt_tokens=50, completion_tokens=7, cached_tokens=40)
    replies = [error_reply(503, openai_error("loading model", error_type="server_error")),
               text_reply("hello", usage=usage)]  # fmt: skip
    async with traced(replies) as (client, exporter, _):
        events = await stream(client, max_output_tokens=100)
        spans = exporter.get_finished_spans()
    done = events[-1]["response"]
    [request] = by_kind(spans, SpanKind.SERVER)
    first, second = by_kind(spans, SpanKind.CLIENT)
    assert request.name == "chat m"
    assert request.attributes is not None and dict(request.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "gen_ai.provider.name": "default",
        "gen_ai.request.max_tokens": 100,
        "codexgate.face": "responses",
        "gen_ai.response.id": done["id"],
        "gen_ai.response.model": done["model"],
        "gen_ai.usage.input_tokens": 50,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.cache_read.input_tokens": 40,
        "gen_ai.usage.reasoning.output_tokens": 0,
        "http.response.status_code": 200,
        "codexgate.outcome": "completed",
    }
    assert request.status.status_code == StatusCode.UNSET
    assert request.resource.attributes["service.name"] == "codexgate"
    for attempt in (first, second):
        assert attempt.parent is not None and attempt.parent.span_id == request.context.span_id
        assert attempt.context.trace_id == request.context.trace_id
        assert attempt.name == "upstream default"
        assert attempt.attributes is not None
        assert attempt.attributes["server.address"] == "upstream.test"
        assert attempt.attributes["url.path"] == "/v1/chat/completions"
    assert first.attributes is not None and second.attributes is not None
    assert first.attributes["http.response.status_code"] == 503
    assert first.attributes["error.type"] == "server_is_overloaded"
    assert first.status.status_code == StatusCode.ERROR
    assert second.attributes["http.response.status_code"] == 200 and "error.type" not in second.attributes
    assert second.attributes["http.request.resend_count"] == 1
    # The answering attempt lasts until its answer was read, inside the request's span.
    assert request.start_time and request.end_time and second.end_time
    assert request.start_time <= first.start_time <= second.start_time <= second.end_time <= request.end_time


async def test_a_failed_response_marks_its_span_an_error() -> None:
    async with traced([cut_reply("cut short")]) as (client, exporter, _):
        events = await stream(client)
        spans = exporter.get_finished_spans()
    assert events[-1]["response"]["error"]["code"] == "upstream_stream_cut"
    [request] = by_kind(spans, SpanKind.SERVER)
    assert request.attributes is not None and request.attributes["error.type"] == "upstream_stream_cut"
    assert request.status.status_code == StatusCode.ERROR


async def test_a_client_error_is_not_the_servers_error() -> None:
    async with traced([error_reply(400, openai_error("bad field"))]) as (client, exporter, _):
        response = await client.post("/v1/responses", json={"model": "m", "input": "go"})
        refused = await client.post("/v1/responses", json={"input": "no model"})
        spans = exporter.get_finished_spans()
    assert response.status_code == refused.status_code == 400
    [request] = by_kind(spans, SpanKind.SERVER)  # the one refused before routing has no span
    assert request.attributes is not None and request.attributes["error.type"] == "invalid_request_error"
    assert request.status.status_code == StatusCode.UNSET
    [attempt] = by_kind(spans, SpanKind.CLIENT)
    assert attempt.attributes is not None and attempt.attributes["http.response.status_code"] == 400


class WatcherSeen(Observer):
    """Notes the attempt watcher a request's backend will find."""

    def __init__(self) -> None:
        self.seen: list[object] = []

    def started(self, exchange: Exchange) -> None:
        self.seen.append(scope.current().attempts)


async def test_with_traces_off_there_is_no_tracer_and_no_attempt_watcher() -> None:
    app = build_app(
        load_settings({"discover": False, "store": "none", "upstream": UPSTREAM}, environ={}),
        transport=ASGIUpstreamTransport(FakeUpstream([text_reply("hi")])),
        environ={},
    )
    assert not any(isinstance(o, Tracing) for o in app.observers.all)
    spy = WatcherSeen()
    app.observers.add(spy)
    async with httpx.AsyncClient(transport=StreamingASGITransport(app), base_url="http://gw") as client:
        response = await client.post("/v1/responses", json={"model": "m", "input": "go"})
    assert response.status_code == 200 and spy.seen == [None]


async def test_the_attempt_watcher_lives_as_long_as_its_request() -> None:
    async with traced([text_reply("one"), text_reply("two")]) as (client, _, app):
        spy = WatcherSeen()
        app.observers.add(spy)
        await stream(client)
        await stream(client)
    first, second = spy.seen
    assert first is not None and second is not None and first is not second
    assert scope.current().attempts is None


def test_the_traces_url_is_the_endpoint_with_v1_traces() -> None:
    assert traces_url("http://127.0.0.1:4318") == "http://127.0.0.1:4318/v1/traces"
    assert traces_url("http://c:4318/") == "http://c:4318/v1/traces"
    assert traces_url("https://c/otlp/v1/traces") == "https://c/otlp/v1/traces"


# -- end to end: spans over OTLP/HTTP to a collector on loopback


class Collector:
    """The smallest OTLP/HTTP trace receiver: POST /v1/traces, protobuf in, 200 out."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self._lock = threading.Lock()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive) or b""
        status = 404
        if scope["method"] == "POST" and scope["path"] == "/v1/traces":
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            with self._lock:
                self.requests.append(request)
            status = 200
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/x-protobuf")]})  # fmt: skip
        await send({"type": "http.response.body", "body": b""})

    def span_names(self) -> list[str]:
        with self._lock:
            return [
                span.name
                for request in self.requests
                for resource in request.resource_spans
                for scoped in resource.scope_spans
                for span in scoped.spans
            ]


async def test_spans_reach_an_otlp_collector_and_the_last_go_out_at_shutdown() -> None:
    collector = Collector()
    async with (
        arun_asgi_server(collector) as collector_url,
        arun_asgi_server(FakeUpstream([text_reply("one"), text_reply("two")])) as fake_url,
    ):
        settings = load_settings(
            {"upstream": fake_url + "/v1", "discover": False, "store": "none", "otlp_endpoint": collector_url,
             "otel_service_name": "gateway-under-test"},
            environ={},
        )  # fmt: skip
        app = build_app(settings, environ={})
        assert any(isinstance(o, Tracing) for o in app.observers.all)
        async with arun_asgi_server(app, lifespan="on") as url, httpx.AsyncClient(base_url=url) as client:
            for _ in range(2):
                response = await client.post("/v1/responses", json={"model": "m", "input": "go"})
                assert response.status_code == 200
        # The gateway has stopped, well within the batch's 5 s delay: its shutdown sent the spans.
        names = collector.span_names()
    assert len(collector.requests) >= 1
    assert sorted(names) == ["chat m", "chat m", "upstream default", "upstream default"]
    service = {
        attribute.value.string_value
        for request in collector.requests
        for resource in request.resource_spans
        for attribute in resource.resource.attributes
        if attribute.key == "service.name"
    }
    assert service == {"gateway-under-test"}
