"""The aiohttp transport against a real loopback server."""

from __future__ import annotations

import socket

import pytest

from codexgate.backends.transport import AiohttpTransport, _nodelay_socket
from codexgate.errors import UpstreamConnectError
from tests.support.fake_upstream import FakeUpstream, cut_reply, text_reply
from tests.support.servers import arun_asgi_server


def test_upstream_sockets_are_created_with_tcp_nodelay() -> None:
    info = socket.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM)[0]
    with _nodelay_socket(info) as sock:
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


async def test_a_stream_is_read_through_the_pooled_session() -> None:
    transport = AiohttpTransport()
    try:
        async with arun_asgi_server(FakeUpstream([text_reply("hello there")])) as url:
            response = await transport.open(
                "POST",
                url + "/v1/chat/completions",
                {"content-type": "application/json"},
                b'{"model":"m","messages":[],"stream":true}',
                5,
            )
            body = b"".join([chunk async for chunk in response.iter_chunks()])
            await response.aclose()
    finally:
        await transport.aclose()
    assert body.endswith(b"data: [DONE]\n\n") and body.count(b"chat.completion.chunk") > 3


async def test_a_dropped_body_raises_connect_error() -> None:
    transport = AiohttpTransport()
    async with arun_asgi_server(FakeUpstream([cut_reply("partial")])) as url:
        response = await transport.open("POST", url + "/v1/chat/completions", {}, b'{"stream":true}', 5)
        with pytest.raises(UpstreamConnectError):
            async for _ in response.iter_chunks():
                pass
        await response.aclose()
    await transport.aclose()


async def test_refused_connection_is_a_connect_error() -> None:
    transport = AiohttpTransport()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(UpstreamConnectError):
        await transport.open("GET", f"http://127.0.0.1:{port}/v1/models", {}, None, 2)
    await transport.aclose()
