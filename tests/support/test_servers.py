"""run_asgi_server and arun_asgi_server (tests/support/servers.py): ASGI apps served by uvicorn on
loopback, read by httpx, aiohttp and codexgate's own AiohttpTransport."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import httpx
import orjson
import pytest

from codexgate.backends.http.transport import AiohttpTransport, HttpRequest
from codexgate.errors import UpstreamConnectError
from codexgate.server.asgi import Receive, Scope, Send
from tests.support.chat_calls import TIMEOUT, chat_body, choice_deltas, chunks_of
from tests.support.fake_upstream import FakeUpstream, cut_reply, stall_reply, text_reply
from tests.support.servers import arun_asgi_server, run_asgi_server

# -- real servers ----------------------------------------------------------------------------------


def test_run_asgi_server_serves_over_tcp() -> None:
    upstream = FakeUpstream([text_reply("over tcp")], models=["m1"])
    with run_asgi_server(upstream) as base_url:
        assert base_url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
            response = client.post("/v1/chat/completions", json=chat_body())
            models = client.get("/v1/models").json()
    chunks, done = chunks_of(response.content)
    assert done and "".join(d.get("content") or "" for d in choice_deltas(chunks)) == "over tcp"
    assert models["data"][0]["id"] == "m1"
    assert response.headers["transfer-encoding"] == "chunked"
    with pytest.raises(httpx.ConnectError):  # shut down: nobody listens any more
        httpx.get(base_url + "/v1/models", timeout=TIMEOUT)


async def test_aiohttp_streams_from_a_served_fake_upstream() -> None:
    upstream = FakeUpstream([text_reply("streamed", delay_between_chunks=0.01)])
    async with arun_asgi_server(upstream) as base_url, aiohttp.ClientSession() as session:
        async with (
            asyncio.timeout(TIMEOUT),
            session.post(base_url + "/v1/chat/completions", json=chat_body()) as response,
        ):
            pieces = [piece async for piece in response.content.iter_any()]
    assert len(pieces) > 1
    chunks, done = chunks_of(b"".join(pieces))
    assert done and "".join(d.get("content") or "" for d in choice_deltas(chunks)) == "streamed"


async def test_production_transport_sees_the_same_cuts_and_disconnects() -> None:
    """The in-process semantics must match what AiohttpTransport meets over real TCP."""
    upstream = FakeUpstream([cut_reply("partial"), stall_reply("slow", 60)])
    transport = AiohttpTransport()
    try:
        async with arun_asgi_server(upstream) as base_url, asyncio.timeout(TIMEOUT):
            url = base_url + "/v1/chat/completions"
            body = orjson.dumps(chat_body())
            response = await transport.open(HttpRequest("POST", url, {}, body, 5.0))
            with pytest.raises(UpstreamConnectError):
                await response.read()
            await response.aclose()

            response = await transport.open(HttpRequest("POST", url, {}, body, 5.0))
            await anext(aiter(response.iter_chunks()))
            await response.aclose()
            await upstream.wait_for_disconnects(1)
            assert upstream.requests[1].disconnected and upstream.disconnects == 1
    finally:
        await transport.aclose()


async def test_arun_asgi_server_in_the_callers_loop() -> None:
    loop_of_app: list[asyncio.AbstractEventLoop] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # no lifespan support: tolerated with lifespan="auto"
        loop_of_app.append(asyncio.get_running_loop())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"same loop"})

    async with arun_asgi_server(app, same_loop=True) as base_url:
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            assert (await client.get(base_url)).text == "same loop"
    assert loop_of_app == [asyncio.get_running_loop()]


def test_run_asgi_server_fails_clearly_when_startup_fails() -> None:
    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "lifespan"
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "no config"})

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="startup"), run_asgi_server(broken):
        pass
    assert time.monotonic() - started < TIMEOUT
