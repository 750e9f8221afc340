"""Prometheus metrics on /metrics (observability/metrics.py): what each request adds, what the backends
tallied (repairs, recoveries, upstream errors and retries, loop-guard stops), the store and the
WebSocket figures, label values kept bounded, and the same API keys as every route."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect

from codexgate.app import build_app
from codexgate.config import load_settings
from codexgate.observability.metrics import _OBSERVED_MAX, OTHER, BoundedLabel, Metrics
from codexgate.server.app import GatewayApp
from codexgate.server.exchange import Exchange
from tests.server.test_app import UPSTREAM
from tests.server.test_open_models import APPLY_PATCH, EXEC
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_upstream import (
    FakeUpstream,
    Usage,
    cut_reply,
    error_reply,
    openai_error,
    text_reply,
    tool_calls_reply,
)
from tests.support.servers import arun_asgi_server
from tests.support.sse import sse_events
from tests.translate.open_models.test_loops import SMOLLM2_LOOP

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


@asynccontextmanager
async def gateway(
    script: Any = (), *, environ: dict[str, str] | None = None, config: Path | None = None, **settings: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, GatewayApp]]:
    """The app in-process over a fake upstream, and the app itself."""
    environ = environ or {}
    flags = {"discover": False, "retry_backoff": 0.01, "store": "none", "upstream": UPSTREAM, **settings}
    transport = ASGIUpstreamTransport(FakeUpstream(script))
    app = build_app(load_settings(flags, config, environ=environ), transport=transport, environ=environ)
    async with httpx.AsyncClient(
        transport=StreamingASGITransport(app), base_url="http://gw", timeout=10
    ) as client:
        yield client, app


async def scrape(client: httpx.AsyncClient, **headers: str) -> Samples:
    response = await client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(response.text)


async def stream(client: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = await client.post("/v1/responses", json={"model": "m", "input": "go", **body, "stream": True})
    assert response.status_code == 200, response.text
    return sse_events(response.content)


async def test_requests_time_tokens_and_tool_calls_are_counted(tmp_path: Path) -> None:
    usage = Usage(prompt_tokens=120, completion_tokens=30, cached_tokens=100, reasoning_tokens=12)
    replies = [
        text_reply("Hello", reasoning="hm", usage=usage),
        tool_calls_reply([("exec_command", '{"cmd":"ls"}')], usage=usage),
        text_reply("chat answer", usage=usage),
    ]
    async with arun_asgi_server(FakeUpstream(replies)) as fake_url:
        settings = load_settings(
            {"upstream": fake_url + "/v1", "discover": False, "store_path": str(tmp_path / "s.db")},
            environ={},
        )
        app = build_app(settings, environ={})
        async with arun_asgi_server(app, lifespan="on") as url, httpx.AsyncClient(base_url=url) as client:
            await stream(client, {})
            await stream(client, {"tools": [EXEC]})
            chat = await client.post(
                "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]}
            )
            refused = await client.post("/v1/responses", json={"input": "no model"})
            samples = await scrape(client)
    assert chat.status_code == 200 and refused.status_code == 400
    requests = "codexgate_requests_total"
    assert value(samples, requests, face="responses", backend="default", model="m", outcome="completed") == 2
    assert value(samples, requests, face="chat", backend="default", model="m", outcome="completed") == 1
    assert (
        value(samples, requests, face="responses", backend="", model="", outcome="invalid_request_error") == 1
    )
    assert value(samples, "codexgate_streams_open", face="responses") == 0
    first_token = "codexgate_time_to_first_token_seconds_count"
    assert value(samples, first_token, face="responses", backend="default") == 2
    assert (
        value(samples, "codexgate_request_duration_seconds_count", face="responses", backend="default") == 2
    )
    tokens = {kind: value(samples, "codexgate_tokens_total", backend="default", model="m", kind=kind)
              for kind in ("input", "output", "cached", "reasoning")}  # fmt: skip
    assert tokens == {"input": 360, "output": 90, "cached": 300, "reasoning": 36}
    calls = "codexgate_tool_calls_total"
    assert value(samples, calls, backend="default", kind="function_call", outcome="completed") == 1
    # The store: every answered request was stored (neither client said store:false).
    assert value(samples, "codexgate_store_writes_total", outcome="ok") == 3
    assert value(samples, "codexgate_store_up") == 1 and value(samples, "codexgate_store_responses") == 3
    assert value(samples, "codexgate_websocket_connections_open") == 0


async def test_recoveries_repairs_and_grammar_checks_are_counted_per_upstream() -> None:
    hermes = '<tool_call>{"name": "exec_command", "arguments": {"cmd": "ls"}}</tool_call>'
    diff = "--- a/x.txt\n+++ b/x.txt\n@@ -1 +1 @@\n-a\n+b\n"
    replies = [
        text_reply(hermes),
        tool_calls_reply([("exec_command", "{'cmd': 'ls',}")]),
        tool_calls_reply([("apply_patch", json.dumps({"input": diff}))]),
        tool_calls_reply([("apply_patch", json.dumps({"input": "please edit x.txt"}))]),
    ]
    async with gateway(replies) as (client, _):
        for _ in replies:
            await stream(client, {"tools": [EXEC, APPLY_PATCH]})
        samples = await scrape(client)
    assert (
        value(
            samples, "codexgate_text_tool_calls_total", backend="default", format="hermes", outcome="parsed"
        )
        == 1
    )
    assert value(samples, "codexgate_tool_arguments_total", backend="default", outcome="repaired") == 1
    assert value(samples, "codexgate_argument_repairs_total", backend="default", kind="single_quotes") == 1
    assert value(samples, "codexgate_grammar_checks_total", backend="default", outcome="repaired") == 1
    assert value(samples, "codexgate_grammar_checks_total", backend="default", outcome="invalid") == 1
    calls = "codexgate_tool_calls_total"
    assert value(samples, calls, backend="default", kind="function_call", outcome="completed") == 2
    assert value(samples, calls, backend="default", kind="custom_tool_call", outcome="completed") == 2
    # A clean stream ends with a usage chunk that has no choices: not a malformed chunk.
    assert value(samples, "codexgate_upstream_malformed_chunks_total", backend="default") is None


async def test_upstream_errors_retries_and_loop_guard_stops_are_counted() -> None:
    looping = text_reply("Sure.\n\n" + SMOLLM2_LOOP * 2000, chunk_chars=6)
    replies = [
        error_reply(503, openai_error("loading model", error_type="server_error")),
        text_reply("after a retry"),
        cut_reply("cut short"),
        looping,
        error_reply(400, openai_error("bad field")),
    ]
    async with gateway(replies, max_retries=1) as (client, _):
        retried = await stream(client, {})
        cut = await stream(client, {})
        stopped = await stream(client, {})
        refused = await client.post("/v1/responses", json={"model": "m", "input": "go"})
        samples = await scrape(client)
    assert retried[-1]["type"] == "response.completed"
    assert cut[-1]["response"]["error"]["code"] == "upstream_stream_cut"
    assert stopped[-1]["response"]["error"]["code"] == "model_output_loop"
    assert refused.status_code == 400
    assert value(samples, "codexgate_upstream_retries_total", backend="default") == 1
    errors = "codexgate_upstream_errors_total"
    assert value(samples, errors, backend="default", code="server_is_overloaded") == 1  # the retried 503
    assert value(samples, errors, backend="default", code="upstream_stream_cut") == 1  # after the first byte
    assert value(samples, errors, backend="default", code="invalid_request_error") == 1
    assert value(samples, errors, backend="default", code="model_output_loop") is None  # the gateway's stop
    assert value(samples, "codexgate_loop_guard_stops_total", backend="default") == 1
    requests = "codexgate_requests_total"
    outcome = "failed:upstream_stream_cut"
    assert value(samples, requests, face="responses", backend="default", model="m", outcome=outcome) == 1


async def test_keys_a_backend_tallies_that_have_no_metric_of_their_own_still_show() -> None:
    async with gateway() as (client, app):
        app.router.backends["default"].counts["something.new"] += 3
        samples = await scrape(client)
    assert value(samples, "codexgate_backend_events_total", backend="default", key="something.new") == 3


async def test_websocket_connections_open_are_shown(tmp_path: Path) -> None:
    async with arun_asgi_server(FakeUpstream([text_reply("hi")])) as fake_url:
        settings = load_settings(
            {"upstream": fake_url + "/v1", "discover": False, "store": "none"}, environ={}
        )
        async with arun_asgi_server(build_app(settings, environ={}), lifespan="on") as url:
            async with httpx.AsyncClient(base_url=url) as client:
                async with connect(url.replace("http://", "ws://") + "/v1/responses") as ws:
                    await ws.send(
                        orjson.dumps({"type": "response.create", "model": "m", "input": "x"}).decode()
                    )
                    while orjson.loads(await ws.recv())["type"] != "response.completed":
                        pass
                    during = await scrape(client)
                after = await _wait_for(client, "codexgate_websocket_connections_open", 0)
    assert value(during, "codexgate_websocket_connections_open") == 1
    assert value(after, "codexgate_websocket_connections_open") == 0
    ws_requests = ("codexgate_requests_total", frozenset(
        {"face": "responses-ws", "backend": "default", "model": "m", "outcome": "completed"}.items()
    ))  # fmt: skip
    assert during[ws_requests] == 1 and after[ws_requests] == 1


async def _wait_for(client: httpx.AsyncClient, name: str, wanted: float, timeout: float = 5.0) -> Samples:
    """Scrape until `name` reads `wanted` (the server ends a closed connection on its own time)."""
    deadline = time.monotonic() + timeout
    while True:
        samples = await scrape(client)
        if value(samples, name) == wanted or time.monotonic() > deadline:
            return samples


async def test_metrics_need_an_api_key_when_keys_are_configured(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'upstream = "{UPSTREAM}"\n[[api_keys]]\nname = "ops"\nkey_env = "OPS_KEY"\n')
    key = "ops-secret-key-0123456789"
    async with gateway(config=config, environ={"OPS_KEY": key}) as (client, _):
        without = await client.get("/metrics")
        wrong = await client.get("/metrics", headers={"authorization": "Bearer not-the-key-at-all"})
        samples = await scrape(client, authorization=f"Bearer {key}")
    assert without.status_code == wrong.status_code == 401
    assert without.json()["error"]["code"] == "invalid_api_key"
    assert ("codexgate_websocket_connections_limit", frozenset()) in samples


async def test_metrics_can_be_turned_off() -> None:
    async with gateway(metrics=False) as (client, _):
        response = await client.get("/metrics")
    assert response.status_code == 404


async def test_openmetrics_is_served_to_a_scraper_that_asks_for_it() -> None:
    async with gateway() as (client, _):
        response = await client.get("/metrics", headers={"accept": "application/openmetrics-text"})
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    assert response.text.endswith("# EOF\n")


# -- label values from clients stay bounded


def test_label_values_are_cut_and_capped() -> None:
    label = BoundedLabel(2)
    assert [label("a"), label("b"), label("c"), label("a"), label(None)] == ["a", "b", OTHER, "a", ""]
    assert label("x" * 500) == OTHER
    assert BoundedLabel(5)("y" * 500) == "y" * 80


def test_past_the_cap_models_count_as_other() -> None:
    metrics = Metrics(max_models=2)
    for model in ("m1", "m2", "m3", "m4", "m1"):
        exchange = Exchange(None, "responses")
        exchange.model, exchange.upstream, exchange.outcome = model, "u", "completed"
        metrics.started(exchange)
        metrics.finished(exchange)
    samples = parse(_text(metrics))
    counted = {
        dict(labels)["model"]: n
        for (name, labels), n in samples.items()
        if name == "codexgate_requests_total"
    }
    assert counted == {"m1": 2, "m2": 1, OTHER: 2}
    assert value(samples, "codexgate_streams_open", face="responses") == 0


def test_what_each_request_counts_is_read_whole_and_held_bounded_between_reads() -> None:
    """The observer tallies in plain dicts and adds to the metrics when they are read: every
    read sees everything counted before it, a stream still open counts as open, and a gateway
    nobody scrapes holds at most _OBSERVED_MAX durations per series."""
    metrics = Metrics()
    held = Exchange(None, "responses")
    metrics.started(held)
    for n in range(2500):
        exchange = Exchange(None, "responses")
        exchange.model, exchange.upstream, exchange.outcome = "m", "u", "completed"
        exchange.usage = {"input_tokens": 10, "output_tokens": 2}
        metrics.started(exchange)
        metrics.finished(exchange)
        if n == 999:
            first = parse(_text(metrics))
    assert all(len(values) < _OBSERVED_MAX for values in metrics._tally._observed.values())
    samples = parse(_text(metrics))
    labels = {"face": "responses", "backend": "u", "model": "m", "outcome": "completed"}
    assert value(first, "codexgate_requests_total", **labels) == 1000
    assert value(samples, "codexgate_requests_total", **labels) == 2500
    assert value(samples, "codexgate_tokens_total", backend="u", model="m", kind="input") == 25000
    duration = {"face": "responses", "backend": "u"}
    assert value(samples, "codexgate_request_duration_seconds_count", **duration) == 2500
    assert value(samples, "codexgate_streams_open", face="responses") == 1
    metrics.finished(held)
    assert value(parse(_text(metrics)), "codexgate_streams_open", face="responses") == 0


def _text(metrics: Metrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.registry).decode()
