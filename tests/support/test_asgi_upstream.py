"""ASGIUpstreamTransport (tests/support/asgi_upstream.py), codexgate's upstream transport served
in-process: closing a response early is a disconnect the app sees, connect failures and crashes
map to codexgate's errors, and a slow reader back-pressures the app."""

from __future__ import annotations

import asyncio

import pytest

from codexgate.backends.http.transport import HttpRequest
from codexgate.errors import UpstreamConnectError, UpstreamTimeout
from codexgate.server.asgi import Receive, Scope, Send
from tests.support._exchange import ExchangeOptions
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.chat_calls import TIMEOUT, UPSTREAM, chat_body, open_chat
from tests.support.fake_upstream import FakeUpstream, stall_reply, text_reply

# -- disconnects -----------------------------------------------------------------------------------


async def test_early_aclose_is_seen_as_a_disconnect() -> None:
    upstream = FakeUpstream([stall_reply("Hello world", stall_seconds=60)])
    transport = ASGIUpstreamTransport(upstream)
    async with asyncio.timeout(TIMEOUT):
        response = await open_chat(transport, chat_body())
        first = await anext(aiter(response.iter_chunks()))
        assert b'"role":"assistant"' in first
        assert upstream.in_flight == 1
        await response.aclose()
        await response.aclose()  # idempotent
    assert upstream.disconnects == 1 and upstream.completed == 0 and upstream.in_flight == 0
    assert upstream.requests[0].disconnected
    assert response.closed and response.disconnected and not response.app_running
    assert not response.forced_cancel  # the app noticed the disconnect by itself


async def test_aclose_from_another_task_wakes_a_blocked_reader() -> None:
    """A gateway may close the upstream response from its disconnect watcher while its relay
    task is waiting for the next chunk: the reader must fail at once, not hang."""
    upstream = FakeUpstream([stall_reply("Hello world", stall_seconds=60)])
    async with asyncio.timeout(TIMEOUT):
        response = await open_chat(ASGIUpstreamTransport(upstream), chat_body())
        first_two = asyncio.Event()

        async def read_all() -> None:
            count = 0
            async for _ in response.iter_chunks():
                count += 1
                if count == 2:
                    first_two.set()

        reader = asyncio.create_task(read_all())
        await first_two.wait()  # the reader is now blocked in the stall
        await response.aclose()
        with pytest.raises(UpstreamConnectError):
            await reader
    assert upstream.disconnects == 1


async def test_transport_aclose_aborts_open_responses() -> None:
    upstream = FakeUpstream([stall_reply("a", 60), stall_reply("b", 60)])
    transport = ASGIUpstreamTransport(upstream)
    async with asyncio.timeout(TIMEOUT):
        for _ in range(2):
            await open_chat(transport, chat_body())
        await transport.aclose()
    assert upstream.disconnects == 2
    assert all(r.closed and not r.app_running for r in transport.responses)


# -- ASGIUpstreamTransport specifics ---------------------------------------------------------------


async def test_simulated_connect_failures() -> None:
    with pytest.raises(UpstreamConnectError):
        await ASGIUpstreamTransport(None).open(HttpRequest("POST", UPSTREAM, {}, b"{}", 1.0))

    upstream = FakeUpstream([text_reply("after recovery")])
    transport = ASGIUpstreamTransport(upstream, fail_connect=True)
    with pytest.raises(UpstreamConnectError):
        await open_chat(transport, chat_body())
    transport.fail_connect = False
    async with asyncio.timeout(TIMEOUT):
        assert (await open_chat(transport, chat_body())).status == 200
    assert transport.opened == 1

    transport = ASGIUpstreamTransport(upstream, connect_delay=10.0)
    async with asyncio.timeout(TIMEOUT):
        with pytest.raises(UpstreamTimeout):
            await transport.open(HttpRequest("POST", UPSTREAM, {}, b"{}", 0.01))


async def test_app_crash_before_headers_is_a_connect_error() -> None:
    async def crashing(scope: Scope, receive: Receive, send: Send) -> None:
        raise ValueError("boom")

    async with asyncio.timeout(TIMEOUT):
        with pytest.raises(UpstreamConnectError) as caught:
            await ASGIUpstreamTransport(crashing).open(HttpRequest("GET", UPSTREAM, {}, None, 1.0))
    assert isinstance(caught.value.__cause__, ValueError)


async def test_slow_reader_back_pressures_the_app() -> None:
    sent = 0
    finished = asyncio.Event()

    async def firehose(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal sent
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(100):
            await send({"type": "http.response.body", "body": b"x", "more_body": True})
            sent += 1
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        finished.set()

    transport = ASGIUpstreamTransport(firehose, options=ExchangeOptions(buffer_chunks=4))
    async with asyncio.timeout(TIMEOUT):
        response = await transport.open(HttpRequest("GET", UPSTREAM, {}, None, 1.0))
        for _ in range(50):
            await asyncio.sleep(0)
        assert sent <= 5 and not finished.is_set()
        assert len(await response.read()) == 100
        await finished.wait()
