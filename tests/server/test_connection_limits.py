"""Connection limits with real sockets against uvicorn on loopback, wired as `codexgate serve`
wires it (server/serve.py, server/connection_limits.py)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import uvicorn

from codexgate.app import build_app
from codexgate.config import Settings, load_settings
from codexgate.server.serve import connection_limits, uvicorn_config
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.processes import until

BOUND = 5.0  # seconds any wait in these tests may take at most


class _App:
    """GET / answers "ok"; GET /hold waits for `release`; GET /stream sends `chunks` chunks."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.holding = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        path = scope["path"]
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        )
        if path == "/hold":
            self.holding += 1
            await self.release.wait()
        elif path == "/stream":
            for _ in range(8):
                await send({"type": "http.response.body", "body": b"tick\n", "more_body": True})
                await asyncio.sleep(0.05)  # a slow model: the stream outlasts the head timeout
        await send({"type": "http.response.body", "body": b"ok"})


@asynccontextmanager
async def serving(
    app: Any, *, websockets: bool = False, **overrides: Any
) -> AsyncIterator[tuple[int, uvicorn.Server]]:
    """`app` under uvicorn in this loop on a free loopback port, with codexgate's limits."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    settings = Settings(port=port, **overrides)
    config = uvicorn_config(app, settings, connection_limits(settings), log_config=None)
    if not websockets:
        config.ws = "none"
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await until(lambda: server.started or task.done(), BOUND)
        assert not task.done(), "uvicorn exited during startup"
        yield port, server
    finally:
        server.should_exit = True
        server.force_exit = True
        async with asyncio.timeout(BOUND):
            await task
        sock.close()


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


def request(path: str = "/", headers: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}\r\n".encode()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(status, body) of one response with a content-length or chunked body."""
    async with asyncio.timeout(BOUND):
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        if status == 101:  # switched protocols: no body follows
            return status, b""
        headers = dict(
            (k.strip().lower(), v.strip())
            for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")[1:])
        )
        if b"content-length" in headers:
            return status, await reader.readexactly(int(headers[b"content-length"]))
        body = b""
        while True:
            size = int((await reader.readline()).strip(), 16)
            if size == 0:
                await reader.readline()
                return status, body
            body += await reader.readexactly(size)
            await reader.readline()


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Whether the server closes the connection (EOF or reset) within BOUND seconds."""
    try:
        async with asyncio.timeout(BOUND):
            while await reader.read(65536):
                pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


async def test_a_connection_that_sends_nothing_is_closed_after_the_head_timeout() -> None:
    async with serving(_App(), header_timeout=0.3) as (port, _):
        reader, writer = await connect(port)
        started = time.monotonic()
        async with asyncio.timeout(BOUND):
            assert await reader.read() == b""  # closed without a response: nothing was asked
        assert 0.25 < time.monotonic() - started < 2.0
        writer.close()


async def test_a_slowloris_head_is_cut_off_with_408_however_it_drips() -> None:
    async with serving(_App(), header_timeout=0.5) as (port, _):
        reader, writer = await connect(port)
        started = time.monotonic()
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")

        async def drip() -> None:  # one header every 0.05 s would go on for 2 s
            try:
                for n in range(40):
                    writer.write(f"x-drip-{n}: y\r\n".encode())
                    await writer.drain()
                    await asyncio.sleep(0.05)
            except ConnectionError:
                pass

        dripping = asyncio.create_task(drip())
        status, body = await read_response(reader)
        elapsed = time.monotonic() - started
        assert status == 408 and orjson.loads(body)["error"]["code"] == "request_timeout"
        assert 0.45 < elapsed < 1.5
        assert await closed_by_server(reader)
        dripping.cancel()
        writer.close()


async def test_a_truncated_body_held_open_gets_408_and_is_closed() -> None:
    settings = load_settings(
        {"upstream": "http://127.0.0.1:9/v1", "discover": False, "body_timeout": 0.3}, environ={}
    )
    # No upstream is reached; a transport of no network, so that the start-up probe opens no
    # session that this server's forced exit (no lifespan shutdown) would leave open.
    app = build_app(settings, transport=ASGIUpstreamTransport(None), environ={})
    async with serving(app, header_timeout=5) as (port, _):
        reader, writer = await connect(port)
        writer.write(
            b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"content-length: 1000\r\n\r\n" + b'{"model": "m", '
        )
        started = time.monotonic()
        status, body = await read_response(reader)
        assert status == 408 and orjson.loads(body)["error"]["code"] == "request_timeout"
        assert time.monotonic() - started < 2.0
        assert await closed_by_server(reader)
        writer.close()


async def test_a_head_over_the_size_limit_is_431_and_closed() -> None:
    async with serving(_App(), max_header_bytes=16 * 1024) as (port, _):
        reader, writer = await connect(port)
        writer.write(request(headers=f"x-big: {'a' * 20_000}\r\n"))  # fits the socket buffers
        status, body = await read_response(reader)
        assert status == 431 and orjson.loads(body)["error"]["code"] == "request_header_fields_too_large"
        assert await closed_by_server(reader)
        writer.close()


async def test_too_many_headers_is_431() -> None:
    async with serving(_App()) as (port, _):
        reader, writer = await connect(port)
        writer.write(request(headers="".join(f"x-h{i}: v\r\n" for i in range(1000))))
        status, _ = await read_response(reader)
        assert status == 431
        writer.close()


async def test_a_16_mb_header_line_is_refused_before_it_is_all_read() -> None:
    async with serving(_App()) as (port, _):
        reader, writer = await connect(port)
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nx-huge: ")
        sent, refused = 0, False
        chunk = b"a" * 65536
        try:
            async with asyncio.timeout(BOUND):
                while sent < 16 * 1024 * 1024:
                    writer.write(chunk)
                    await writer.drain()
                    sent += len(chunk)
        except ConnectionError:
            refused = True
        assert refused or await closed_by_server(reader)
        assert sent < 16 * 1024 * 1024  # the server stopped reading long before the end
        writer.close()


async def test_idle_connections_beyond_the_cap_are_closed_oldest_first() -> None:
    async with serving(_App(), max_idle_connections=3) as (port, server):
        clients = []
        for _ in range(10):
            reader, writer = await connect(port)
            writer.write(request())
            assert await read_response(reader) == (200, b"ok")
            clients.append((reader, writer))
        await until(lambda: len(server.server_state.connections) <= 3, BOUND)
        for reader, _ in clients[:7]:
            assert await closed_by_server(reader)
        for reader, writer in clients[7:]:  # the newest stay usable (keep-alive)
            writer.write(request())
            assert await read_response(reader) == (200, b"ok")
        for _, writer in clients:
            writer.close()


async def test_a_burst_of_new_connections_is_not_cut_by_the_idle_cap() -> None:
    """Connections that have not sent their first request yet are not keep-alive idle: a burst
    of clients connecting at once must all be served (the bench lost 243 of 500 to this)."""
    async with serving(_App(), max_idle_connections=3) as (port, _):
        clients = [await connect(port) for _ in range(20)]
        try:
            for _, writer in clients:
                writer.write(request())
            for reader, _ in clients:
                assert await read_response(reader) == (200, b"ok")
        finally:
            for _, writer in clients:
                writer.close()


async def test_past_max_connections_an_idle_one_makes_room_else_503() -> None:
    app = _App()
    async with serving(app, max_connections=3) as (port, _):
        idle_reader, idle_writer = await connect(port)
        idle_writer.write(request())
        assert await read_response(idle_reader) == (200, b"ok")
        busy = []
        for _ in range(2):
            reader, writer = await connect(port)
            writer.write(request("/hold"))
            busy.append((reader, writer))
        await until(lambda: app.holding >= 2, BOUND)
        # A fourth connection: the idle one is closed to make room, the new one is served.
        reader, writer = await connect(port)
        writer.write(request("/hold"))
        assert await closed_by_server(idle_reader)
        await until(lambda: app.holding >= 3, BOUND)
        # A fifth: nothing is idle, so it is refused at once.
        extra_reader, extra_writer = await connect(port)
        status, body = await read_response(extra_reader)
        assert status == 503 and orjson.loads(body)["error"]["code"] == "too_many_connections"
        app.release.set()
        for r, _ in [*busy, (reader, writer)]:
            status, body = await read_response(r)
            assert status == 200 and body.endswith(b"ok")
        for w in (idle_writer, extra_writer, writer, *(w for _, w in busy)):
            w.close()


async def test_a_long_stream_and_keep_alive_reuse_outlast_the_head_timeout() -> None:
    async with serving(_App(), header_timeout=0.1) as (port, _):
        reader, writer = await connect(port)
        for _ in range(2):  # the same connection, a turn after another
            writer.write(request("/stream"))
            status, body = await read_response(reader)
            assert status == 200 and body.count(b"tick") == 8  # 0.4 s, four head timeouts
        writer.close()


async def test_a_websocket_upgrade_without_a_key_is_refused_on_the_wire() -> None:
    environ = {"CODEXGATE_API_KEYS": "ws-test-key-123456"}
    settings = load_settings({"upstream": "http://127.0.0.1:9/v1", "discover": False}, environ=environ)
    app = build_app(settings, transport=ASGIUpstreamTransport(None), environ=environ)
    upgrade = (
        "GET /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{}\r\n"
    )
    async with serving(app, websockets=True) as (port, _):
        for extra, status in (("", 401), ("x-api-key: ws-test-key-123456\r\n", 101)):
            reader, writer = await connect(port)
            writer.write(upgrade.format(extra).encode())
            got, _ = await read_response(reader)
            assert got == status
            writer.close()
