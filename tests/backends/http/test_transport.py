"""The aiohttp transport against a real loopback server."""

from __future__ import annotations

import asyncio
import socket

import orjson
import pytest

from codexgate.backends.http.transport import AiohttpTransport, BodyParts, HttpRequest, _nodelay_socket
from codexgate.errors import UpstreamConnectError
from tests.support.fake_upstream import FakeUpstream, cut_reply, text_reply
from tests.support.processes import free_port, until
from tests.support.servers import arun_asgi_server


def test_upstream_sockets_are_created_with_tcp_nodelay() -> None:
    info = socket.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM)[0]
    with _nodelay_socket(info) as sock:
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


async def test_a_stream_is_read_through_the_pooled_session() -> None:
    """The body in pieces too (a chat request's, backends/chat/backend.py): sent joined."""
    transport = AiohttpTransport()
    upstream = FakeUpstream([text_reply("hello there")])
    try:
        async with arun_asgi_server(upstream) as url:
            response = await transport.open(
                HttpRequest(
                    "POST",
                    url + "/v1/chat/completions",
                    {"content-type": "application/json"},
                    BodyParts.of([b'{"model":"m",', b'"messages":[],', b'"stream":true}']),
                    5,
                )
            )
            body = b"".join([chunk async for chunk in response.iter_chunks()])
            await response.aclose()
    finally:
        await transport.aclose()
    assert body.endswith(b"data: [DONE]\n\n") and body.count(b"chat.completion.chunk") > 3
    assert upstream.requests[0].body == {"model": "m", "messages": [], "stream": True}


async def test_a_dropped_body_raises_connect_error() -> None:
    transport = AiohttpTransport()
    async with arun_asgi_server(FakeUpstream([cut_reply("partial")])) as url:
        response = await transport.open(
            HttpRequest("POST", url + "/v1/chat/completions", {}, b'{"stream":true}', 5)
        )
        with pytest.raises(UpstreamConnectError):
            async for _ in response.iter_chunks():
                pass
        await response.aclose()
    await transport.aclose()


async def test_refused_connection_is_a_connect_error() -> None:
    transport = AiohttpTransport()
    with pytest.raises(UpstreamConnectError):
        await transport.open(HttpRequest("GET", f"http://127.0.0.1:{free_port()}/v1/models", {}, None, 2))
    await transport.aclose()


async def test_a_resting_response_reads_nothing_from_its_socket_meanwhile() -> None:
    """`rest()` pauses the socket (the upstream's events wait in the kernel, then come in one
    read): while it rests the connection is not read, after it the body goes on whole."""
    transport = AiohttpTransport()
    text = "one two three four five six seven eight nine ten"
    try:
        async with arun_asgi_server(FakeUpstream([text_reply(text, delay_between_chunks=0.005)])) as url:
            body = b'{"model":"m","messages":[],"stream":true}'
            response = await transport.open(HttpRequest("POST", url + "/v1/chat/completions", {}, body, 5))
            chunks = aiter(response.iter_chunks())
            first = await anext(chunks)
            connection = response._resp.connection  # type: ignore[attr-defined]
            assert connection is not None and connection.transport.is_reading()
            resting = asyncio.create_task(response.rest(0.1))
            await until(lambda: not connection.transport.is_reading(), 5, "read while it rested")
            assert not resting.done()
            await resting
            assert connection.transport.is_reading()
            rest = b"".join([chunk async for chunk in chunks])
            await response.aclose()
    finally:
        await transport.aclose()
    body = first + rest
    assert body.endswith(b"data: [DONE]\n\n")
    pieces = [orjson.loads(line[6:]) for line in body.split(b"\n\n") if line.startswith(b"data: {")]
    assert "".join(p["choices"][0]["delta"].get("content") or "" for p in pieces if p["choices"]) == text
