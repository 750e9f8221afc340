"""The idle timeout is a budget for the whole request: retries cannot stretch the wait for the
first upstream byte, and the error says what happened and after how long."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx

from codexgate.app import build_app
from codexgate.backends.http.transport import HttpRequest
from codexgate.config import load_settings
from tests.server.test_app import UPSTREAM, gateway, terminal
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_upstream import FakeUpstream, error_reply, openai_error, stall_reply
from tests.support.sse import stream_events


def _client(upstream: Any, **settings: Any) -> httpx.AsyncClient:
    flags = {"upstream": UPSTREAM, "discover": False, "retry_backoff": 0.01, **settings}
    app = build_app(load_settings(flags, environ={}), transport=ASGIUpstreamTransport(upstream), environ={})
    return httpx.AsyncClient(transport=StreamingASGITransport(app), base_url="http://gw", timeout=10)


def _seconds_in(message: str) -> float:
    match = re.search(r"within ([0-9.]+) seconds", message)
    assert match, message
    return float(match.group(1))


async def test_a_server_that_never_answers_fails_within_the_idle_timeout_whatever_the_retries() -> None:
    requests = 0

    async def silent(scope: Any, receive: Any, send: Any) -> None:
        nonlocal requests
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            requests += 1
        while (await receive())["type"] != "http.disconnect":  # never sends headers
            pass

    loop = asyncio.get_running_loop()
    async with _client(silent, idle_timeout=0.4, connect_timeout=5, max_retries=5) as client:
        started = loop.time()
        response = await client.post("/v1/responses", json={"model": "m", "input": "x"})
        elapsed = loop.time() - started
    error = response.json()["error"]
    assert response.status_code == 504 and error["code"] == "upstream_timeout"
    assert 0.4 <= _seconds_in(error["message"]) < 1.0
    assert "idle timeout 0.4 s" in error["message"] and "1 attempt" in error["message"]
    assert error["message"].startswith(f"upstream 'default' ({UPSTREAM}) sent no response within")
    assert elapsed < 1.5 and requests == 1  # the old behaviour: (connect + idle) x 6 attempts


async def test_retries_stop_when_the_budget_has_no_room_for_another_attempt() -> None:
    overloaded = error_reply(500, openai_error("worker crashed", error_type="server_error"))
    fake = FakeUpstream([overloaded] * 10)
    loop = asyncio.get_running_loop()
    # Backoff 0.3 s, 0.6 s, 1.2 s ... against a 0.5 s budget: one retry fits, the next does not.
    async with _client(fake, idle_timeout=0.5, retry_backoff=0.3, max_retries=8) as client:
        started = loop.time()
        response = await client.post("/v1/responses", json={"model": "m", "input": "x"})
        elapsed = loop.time() - started
    assert response.status_code == 502 and "worker crashed" in response.json()["error"]["message"]
    assert len(fake.requests) == 2 and elapsed < 1.0


async def test_headers_then_silence_counts_against_the_first_byte_budget() -> None:
    async def headers_only(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if not scope["path"].endswith("/chat/completions"):
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await receive()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
        while (await receive())["type"] != "http.disconnect":
            pass

    async with _client(headers_only, idle_timeout=0.3) as client:
        response = await client.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
    last = [line for line in response.text.splitlines() if line.startswith("data:")][-1]
    assert '"response.failed"' in last and "upstream_timeout" in last
    assert "sent no data within" in last


async def test_silence_between_events_names_the_idle_timeout() -> None:
    async with gateway([stall_reply("slow answer", stall_seconds=5)], idle_timeout=0.2) as (client, _, _):
        events = await stream_events(client, {"model": "m", "input": "x"})
    error = terminal(events)["response"]["error"]
    assert error["code"] == "upstream_timeout"
    assert (
        error["message"]
        == "upstream 'default' (http://upstream.test/v1) sent nothing for 0.2 seconds (idle timeout)."
    )


def test_a_real_server_that_accepts_and_never_answers_fails_after_the_idle_timeout() -> None:
    """Real sockets: the listener accepts connections (the kernel does, from its backlog) and
    never reads or answers; with retries allowed the request still ends after the idle timeout."""
    import socket
    import time

    from tests.support.processes import serve_process

    with socket.socket() as deaf:
        deaf.bind(("127.0.0.1", 0))
        deaf.listen(64)
        upstream = f"http://127.0.0.1:{deaf.getsockname()[1]}/v1"
        with serve_process("--upstream", upstream, "--idle-timeout", "1", "--max-retries", "3") as gw:
            started = time.monotonic()
            response = httpx.post(gw.base + "/v1/responses", json={"model": "m", "input": "x"}, timeout=30)
            elapsed = time.monotonic() - started
    assert response.status_code == 504, response.text
    assert response.json()["error"]["code"] == "upstream_timeout"
    assert elapsed < 2.5  # was (connect + idle) x attempts: 4 x 11 s with these flags


class _Timed:
    """A transport that notes when each attempt of a chat request starts (not the probes of the
    model's window, one of which, Ollama's, is a POST too)."""

    def __init__(self, inner: ASGIUpstreamTransport) -> None:
        self.inner = inner
        self.times: list[float] = []

    async def open(self, request: HttpRequest) -> Any:
        if request.method == "POST" and request.url.endswith("/chat/completions"):
            self.times.append(asyncio.get_running_loop().time())
        return await self.inner.open(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _waits_between_attempts(inner: ASGIUpstreamTransport) -> list[float]:
    timed = _Timed(inner)
    flags = {"upstream": UPSTREAM, "discover": False, "retry_backoff": 0.1, "max_retries": 3}
    app = build_app(load_settings(flags, environ={}), transport=timed, environ={})
    async with httpx.AsyncClient(
        transport=StreamingASGITransport(app), base_url="http://gw", timeout=10
    ) as client:
        response = await client.post("/v1/responses", json={"model": "m", "input": "x"})
    assert response.status_code == 502
    return [later - earlier for earlier, later in zip(timed.times, timed.times[1:], strict=False)]


async def test_retry_n_waits_the_backoff_doubled_n_minus_1_times() -> None:
    """docs/configuration.md, "Retries": 0.1 s, 0.2 s, 0.4 s (+-10%) after a 5xx."""
    overloaded = error_reply(500, openai_error("worker crashed", error_type="server_error"))
    waits = await _waits_between_attempts(ASGIUpstreamTransport(FakeUpstream([overloaded] * 10)))
    assert len(waits) == 3
    for wait, backoff in zip(waits, (0.1, 0.2, 0.4), strict=True):
        assert backoff * 0.9 <= wait < backoff * 1.1 + 0.25, waits


async def test_the_first_retry_after_a_connection_error_is_immediate() -> None:
    """The same schedule, but the first retry does not wait (a pooled connection the server had
    closed is the usual cause): 0 s, 0.2 s, 0.4 s."""
    waits = await _waits_between_attempts(ASGIUpstreamTransport(None))
    assert len(waits) == 3
    assert waits[0] < 0.09, waits
    for wait, backoff in zip(waits[1:], (0.2, 0.4), strict=True):
        assert backoff * 0.9 <= wait < backoff * 1.1 + 0.25, waits
