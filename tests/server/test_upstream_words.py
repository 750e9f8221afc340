"""What a client reads when the upstream cannot be reached or breaks: the upstream's configured
name and URL and what failed, in plain words, never a library's message ("Cannot connect to
host ... ssl:default [Connect call failed ...]"). Real sockets, the production transport."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import types
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp
import httpx
import pytest

from codexgate.app import build_app
from codexgate.backends.http.h1 import DefaultTransport
from codexgate.backends.http.transport import (
    ClosedBeforeAnswer,
    ClosedMidAnswer,
    NotHttpAnswer,
    failure_reason,
)
from codexgate.config import load_settings
from tests.server.test_app import terminal
from tests.support.asgi_client import StreamingASGITransport
from tests.support.processes import free_port
from tests.support.sse import sse_events

LIBRARY_WORDS = ("ssl:default", "Connect call failed", "Errno", "Cannot connect to host", "ClientConnector")


@asynccontextmanager
async def raw_server(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[int]:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()


async def ask(upstream: str, *, stream: bool = False) -> httpx.Response:
    settings = load_settings({"upstream": upstream, "discover": False, "max_retries": 0}, environ={})
    transport = DefaultTransport()  # http:// through codexgate's own client, https:// through aiohttp
    app = build_app(settings, transport=transport, environ={})
    try:
        async with httpx.AsyncClient(
            transport=StreamingASGITransport(app), base_url="http://gw", timeout=20
        ) as client:
            return await client.post("/v1/responses", json={"model": "m", "input": "x", "stream": stream})
    finally:
        await transport.aclose()


def plain(message: str) -> str:
    assert not [w for w in LIBRARY_WORDS if w in message], message
    return message


async def test_a_refused_connection_names_the_upstream_and_the_address() -> None:
    port = free_port()
    response = await ask(f"http://127.0.0.1:{port}/v1")
    error = response.json()["error"]
    assert response.status_code == 502 and error["code"] == "upstream_unreachable"
    assert plain(error["message"]) == (
        f"upstream 'default' (http://127.0.0.1:{port}/v1) refused the connection: "
        f"nothing is listening on 127.0.0.1:{port}."
    )


async def test_a_host_name_that_does_not_resolve_says_dns() -> None:
    response = await ask("http://codexgate-test.invalid/v1")
    error = response.json()["error"]
    assert error["code"] == "upstream_unreachable"
    assert plain(error["message"]) == (
        "upstream 'default' (http://codexgate-test.invalid/v1) could not be found: "
        "the host name codexgate-test.invalid does not resolve (DNS)."
    )


async def test_https_to_a_plain_http_server_says_so() -> None:
    async def http_only(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1000)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    async with raw_server(http_only) as port:
        response = await ask(f"https://127.0.0.1:{port}/v1")
    error = response.json()["error"]
    assert error["code"] == "upstream_unreachable"
    assert plain(error["message"]) == (
        f"upstream 'default' (https://127.0.0.1:{port}/v1) failed the TLS handshake: the server does "
        "not speak TLS on this port (is its URL http://, not https://?)."
    )


async def test_a_server_that_closes_without_answering() -> None:
    async def closer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1000)
        writer.close()

    async with raw_server(closer) as port:
        response = await ask(f"http://127.0.0.1:{port}/v1")
    assert plain(response.json()["error"]["message"]) == (
        f"upstream 'default' (http://127.0.0.1:{port}/v1) closed the connection without answering."
    )


async def test_a_connection_reset_mid_stream_fails_the_response_in_plain_words() -> None:
    chunk = b'data: {"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}\n\n'

    async def reset_mid_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await writer.drain()
        await asyncio.sleep(0.05)  # the answer's first bytes are taken before the reset
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, not FIN
        writer.transport.abort()

    async with raw_server(reset_mid_answer) as port:
        response = await ask(f"http://127.0.0.1:{port}/v1", stream=True)
    failed = terminal(sse_events(response.content))
    assert failed["type"] == "response.failed"
    error = failed["response"]["error"]
    assert error["code"] == "upstream_stream_cut"
    assert plain(error["message"]) in (
        f"upstream 'default' (http://127.0.0.1:{port}/v1) {what}, before the model finished."
        for what in ("closed the connection mid-answer", "reset the connection")
    )


def test_a_refused_certificate_says_why() -> None:
    refused = ssl.SSLCertVerificationError(1, "certificate verify failed")
    refused.verify_message = "self-signed certificate"
    key = types.SimpleNamespace(host="h", port=443, ssl=True, is_ssl=True)
    error = aiohttp.ClientConnectorCertificateError(key, refused)  # type: ignore[arg-type]
    assert (
        failure_reason(error, "https://h/v1", 10)
        == "failed the TLS certificate check: self-signed certificate"
    )


@pytest.mark.parametrize(
    "exc,expected",
    [
        (TimeoutError(), "did not accept a connection within 10 s (connect_timeout)"),
        (ConnectionResetError(), "reset the connection"),
        (aiohttp.ServerDisconnectedError(), "closed the connection without answering"),
        (aiohttp.ClientPayloadError("Response payload is not completed"), "closed the connection mid-answer"),
        (OSError(113, "No route to host"), "could not be reached: there is no route to h"),
        # codexgate's own client (backends/http/h1.py) raises the socket's errors as they are
        (
            ConnectionRefusedError(111, "Connection refused"),
            "refused the connection: nothing is listening on h:8000",
        ),
        (
            socket.gaierror(-2, "Name or service not known"),
            "could not be found: the host name h does not resolve (DNS)",
        ),
        (ClosedBeforeAnswer(), "closed the connection without answering"),
        (ClosedMidAnswer(), "closed the connection mid-answer"),
        (NotHttpAnswer("invalid HTTP status"), "answered with something that is not HTTP"),
    ],
)
def test_each_failure_reads_as_words(exc: BaseException, expected: str) -> None:
    assert failure_reason(exc, "http://h:8000/v1", 10) == expected


async def test_an_upstream_that_redirects_is_named_with_where_it_points() -> None:
    # An upstream behind http:// that sends clients to https:// (a proxy's rule): the gateway
    # does not follow it, and the client reads where to point the upstream.
    async def redirect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 308 Permanent Redirect\r\nLocation: https://models.example/v1/chat/completions\r\n"
            b"Content-Length: 0\r\n\r\n"
        )
        await writer.drain()
        writer.close()

    async with raw_server(redirect) as port:
        response = await ask(f"http://127.0.0.1:{port}/v1")
    error = response.json()["error"]
    assert response.status_code == 400 and error["code"] == "upstream_wrong_url"
    assert "HTTP 308" in error["message"]
    assert "a redirect to https://models.example/v1/chat/completions" in plain(error["message"])
