"""codexgate's own HTTP/1.1 client (backends/http/h1.py) against loopback servers that write
raw HTTP, so that chunking, closes and resets are the test's to choose."""

from __future__ import annotations

import asyncio
import gzip
import inspect
import socket
import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest
import uvloop

from codexgate.backends.http.h1 import DefaultTransport, H1Response, H1Transport
from codexgate.backends.http.transport import Body, BodyParts, HttpRequest, UpstreamResponse
from codexgate.errors import UpstreamConnectError, UpstreamTimeout
from tests.support.processes import free_port, until

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def on_both_loops(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """The test on each loop: uvloop in production, asyncio's own elsewhere (their transports
    differ in what pause_reading, close and abort do, and when)."""

    def run(loop: str, **kwargs: Any) -> None:
        with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
            runner.run(test(**kwargs))

    named = inspect.Parameter.KEYWORD_ONLY
    params = [p.replace(kind=named) for p in inspect.signature(test).parameters.values()]
    run.__signature__ = inspect.Signature([inspect.Parameter("loop", named), *params])  # type: ignore[attr-defined]
    run.__name__, run.__doc__ = test.__name__, test.__doc__
    return pytest.mark.parametrize("loop", list(LOOPS))(run)  # type: ignore[no-any-return]


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class RawServer:
    """A loopback server; `handle` serves each connection (every request on it). Counts the
    connections and keeps the heads of the requests it read."""

    def __init__(self, handle: Handler) -> None:
        self.handle = handle
        self.connections = 0
        self.heads: list[bytes] = []
        self.url = ""
        self._tasks: set[asyncio.Task[None]] = set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self.handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def request(self, reader: asyncio.StreamReader) -> bytes | None:
        """The next request's head and body off the connection, None at its end."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        self.heads.append(head)
        length = next(
            (
                int(line.split(b":")[1])
                for line in head.lower().split(b"\r\n")
                if line.startswith(b"content-length:")
            ),
            0,
        )
        return head + await reader.readexactly(length)


@asynccontextmanager
async def raw_server(handle: Handler) -> AsyncIterator[RawServer]:
    raw = RawServer(handle)
    server = await asyncio.start_server(raw._serve, "127.0.0.1", 0)
    raw.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
    try:
        yield raw
    finally:
        server.close()
        for task in raw._tasks:
            task.cancel()
        await asyncio.gather(*raw._tasks, return_exceptions=True)


def post(url: str, body: Body = b'{"stream":true}', timeout: float = 5) -> HttpRequest:
    return HttpRequest(
        "POST", url, {"content-type": "application/json", "authorization": "Bearer k"}, body, timeout
    )


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def answer(body: bytes, *extra: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (
        len(body),
        b"".join(e + b"\r\n" for e in extra),
        body,
    )


async def chunks_of(response: UpstreamResponse) -> list[bytes]:
    return [piece async for piece in response.iter_chunks()]


@asynccontextmanager
async def h1(max_connections: int = 1000) -> AsyncIterator[H1Transport]:
    transport = H1Transport(max_connections)
    try:
        yield transport
    finally:
        await transport.aclose()


@on_both_loops
async def test_a_chunked_event_stream_is_read_piece_by_piece_as_it_arrives() -> None:
    events = [b'data: {"n":%d}\n\n' % i for i in range(4)]
    read_one = asyncio.Event()

    async def stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.request(reader)
        writer.write(SSE_HEAD)
        for event in events:
            writer.write(chunk(event[:5]) + chunk(event[5:]))  # an event in two chunks
            await writer.drain()
            await asyncio.wait_for(read_one.wait(), 5)  # the next only once this one was read
            read_one.clear()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        await reader.read()

    async with raw_server(stream) as server, h1() as transport:
        response = await transport.open(post(server.url))
        assert response.status == 200 and response.headers["Content-Type"] == "text/event-stream"
        got = []
        async for piece in response.iter_chunks():
            got.append(piece)
            read_one.set()
        await response.aclose()
    assert b"".join(got) == b"".join(events)
    assert len(got) >= len(events)  # each event came on its own, not once the body ended


@on_both_loops
async def test_a_content_length_body_and_the_request_as_sent() -> None:
    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.request(reader)
        reply = answer(b'{"ok":true,"text":"hello"}', b"X-Thing: 1")
        writer.write(reply[:-10])
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(reply[-10:])
        await reader.read()

    async with raw_server(one) as server, h1() as transport:
        response = await transport.open(post(server.url, b'{"model":"m"}'))
        assert response.headers["x-thing"] == "1"
        assert await response.read() == b'{"ok":true,"text":"hello"}'
        await response.aclose()
    port = server.url.split(":")[2].split("/")[0]
    assert server.heads[0] == (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%s\r\ncontent-type: application/json\r\n"
        b"authorization: Bearer k\r\nContent-Length: 13\r\nAccept-Encoding: identity\r\n\r\n" % port.encode()
    )


@pytest.mark.parametrize("size", [300, 400_000])
@on_both_loops
async def test_a_body_in_pieces_is_sent_whole_as_its_bytes(size: int) -> None:
    """Joined with the head when small, each piece handed to a vectored write when large."""
    pieces = [b'{"messages":[', *[b'"%s",' % (b"x" * 97) for _ in range(size // 100)], b'"end"]}']
    got: list[bytes] = []

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await server.request(reader)
        assert request is not None
        got.append(request.split(b"\r\n\r\n", 1)[1])
        writer.write(answer(b"{}"))
        await reader.read()

    async with raw_server(one) as server, h1() as transport:
        response = await transport.open(post(server.url, BodyParts.of(pieces)))
        assert await response.read() == b"{}"
        await response.aclose()
    assert got == [b"".join(pieces)]
    assert b"Content-Length: %d\r\n" % len(got[0]) in server.heads[0]


@on_both_loops
async def test_a_body_read_until_the_server_closes() -> None:
    async def until_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\npart one, ")
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(b"part two")
        await writer.drain()
        writer.close()

    async with raw_server(until_close) as server, h1() as transport:
        response = await transport.open(post(server.url))
        assert await response.read() == b"part one, part two"
        await response.aclose()
        assert not transport._open  # such a connection is never reused


@on_both_loops
async def test_sequential_requests_reuse_one_connection() -> None:
    async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await server.request(reader) is not None:
            writer.write(answer(b"answer %d" % len(server.heads)))

    async with raw_server(keep_alive) as server, h1() as transport:
        bodies = []
        for _ in range(3):
            response = await transport.open(post(server.url))
            bodies.append(await response.read())
            await response.aclose()
    assert bodies == [b"answer 1", b"answer 2", b"answer 3"]
    assert server.connections == 1


@on_both_loops
async def test_a_connection_the_server_closed_while_idle_is_dropped_from_the_pool() -> None:
    async def one_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.request(reader)
        writer.write(answer(b"once"))
        await writer.drain()

    async with raw_server(one_then_close) as server, h1() as transport:
        response = await transport.open(post(server.url))
        assert await response.read() == b"once"
        await until(lambda: not transport._open, 5, "the closed connection stayed in the pool")


@on_both_loops
async def test_a_stale_idle_connection_is_retried_once_on_a_fresh_one() -> None:
    """The server took the second request on the idle connection and closed it unanswered (its
    keep-alive timeout, just then): the client sends it again on a new connection."""

    async def closes_the_second(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first_connection = server.connections == 1
        await server.request(reader)
        writer.write(answer(b"from connection %d" % server.connections))
        await writer.drain()
        if first_connection:
            await server.request(reader)  # the second request, never answered

    async with raw_server(closes_the_second) as server, h1() as transport:
        first = await transport.open(post(server.url))
        assert await first.read() == b"from connection 1"
        second = await transport.open(post(server.url))
        assert await second.read() == b"from connection 2"
    assert server.connections == 2 and len(server.heads) == 3


@on_both_loops
async def test_a_reused_connection_is_not_retried_once_the_answer_began() -> None:
    async def cuts_the_second(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.request(reader)
        writer.write(answer(b"ok"))
        await server.request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-")  # then the connection ends

    async with raw_server(cuts_the_second) as server, h1() as transport:
        first = await transport.open(post(server.url))
        assert await first.read() == b"ok"
        with pytest.raises(UpstreamConnectError, match="closed the connection without answering"):
            await transport.open(post(server.url))
    assert server.connections == 1 and len(server.heads) == 2


@on_both_loops
async def test_closing_an_unfinished_answer_closes_the_socket() -> None:
    saw_eof = asyncio.Event()

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.request(reader)
        writer.write(SSE_HEAD + chunk(b"data: {}\n\n"))
        await writer.drain()
        if await reader.read() == b"":
            saw_eof.set()

    async with raw_server(endless) as server, h1() as transport:
        response = await transport.open(post(server.url))
        assert await anext(aiter(response.iter_chunks())) == b"data: {}\n\n"
        await response.aclose()
        await response.aclose()  # twice is fine
        await asyncio.wait_for(saw_eof.wait(), 5)
        assert not transport._open


@on_both_loops
async def test_a_refused_connection_says_nothing_listens() -> None:
    port = free_port()
    async with h1() as transport:
        with pytest.raises(UpstreamConnectError) as caught:
            await transport.open(post(f"http://127.0.0.1:{port}/v1/chat/completions"))
    assert caught.value.reason == f"refused the connection: nothing is listening on 127.0.0.1:{port}"
    assert not transport._open


@on_both_loops
async def test_a_connect_that_takes_too_long_is_a_timeout() -> None:
    """A listening socket whose backlog is full: the kernel drops further SYNs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filling = []
    for _ in range(3):
        sock = socket.socket()
        sock.setblocking(False)
        try:
            sock.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        filling.append(sock)
    try:
        async with h1() as transport:
            with pytest.raises(UpstreamTimeout) as caught:
                await transport.open(post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=0.2))
            assert not transport._open
    finally:
        for sock in [*filling, listener]:
            sock.close()
    assert caught.value.reason == "did not accept a connection within 0.2 s (connect_timeout)"


@on_both_loops
async def test_a_body_cut_mid_chunk_breaks_the_stream() -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.request(reader)
        writer.write(SSE_HEAD + chunk(b"data: {}\n\n") + b"40\r\ndata: {")  # a chunk of 64, cut

    async with raw_server(cut) as server, h1() as transport:
        response = await transport.open(post(server.url))
        got = []
        with pytest.raises(UpstreamConnectError) as caught:
            async for piece in response.iter_chunks():
                got.append(piece)
        await response.aclose()
    assert b"".join(got) == b"data: {}\n\ndata: {"  # what came before the cut, then the error
    assert caught.value.reason == "closed the connection mid-answer"


@on_both_loops
async def test_a_content_length_body_cut_short_breaks_the_stream() -> None:
    async def short(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"partial":')

    async with raw_server(short) as server, h1() as transport:
        response = await transport.open(post(server.url))
        with pytest.raises(UpstreamConnectError, match="closed the connection mid-answer"):
            await response.read()


@on_both_loops
async def test_a_reset_mid_answer_says_reset() -> None:
    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.request(reader)
        writer.write(SSE_HEAD + chunk(b"data: {}\n\n"))
        await writer.drain()
        await asyncio.sleep(0.05)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, not FIN
        writer.transport.abort()

    async with raw_server(reset) as server, h1() as transport:
        response = await transport.open(post(server.url))
        with pytest.raises(UpstreamConnectError) as caught:
            await chunks_of(response)
    assert caught.value.reason == "reset the connection"


@on_both_loops
async def test_an_answer_that_is_not_http() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await reader.read()

    async with raw_server(garbage) as server, h1() as transport:
        with pytest.raises(UpstreamConnectError) as caught:
            await transport.open(post(server.url))
    assert caught.value.reason == "answered with something that is not HTTP"


@pytest.mark.parametrize(
    "encoding,compress",
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw deflate, as some servers send it
    ],
    ids=["gzip", "deflate", "raw-deflate"],
)
@on_both_loops
async def test_a_compressed_body_is_decoded(encoding: str, compress: Callable[[bytes], bytes]) -> None:
    text = b"".join(b'data: {"n":%d}\n\n' % i for i in range(500))
    packed = compress(text)

    async def compressed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.request(reader)
        writer.write(SSE_HEAD.replace(b"\r\n\r\n", b"\r\ncontent-encoding: %s\r\n\r\n" % encoding.encode()))
        for at in range(0, len(packed), 100):
            writer.write(chunk(packed[at : at + 100]))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await reader.read()

    async with raw_server(compressed) as server, h1() as transport:
        response = await transport.open(post(server.url))
        assert await response.read() == text
        await response.aclose()


@on_both_loops
async def test_at_the_connection_limit_a_request_waits_for_a_free_connection() -> None:
    async def streams(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.request(reader)
        writer.write(SSE_HEAD + chunk(b"data: {}\n\n"))
        await reader.read()

    async with raw_server(streams) as server, h1(max_connections=1) as transport:
        first = await transport.open(post(server.url))
        second = asyncio.create_task(transport.open(post(server.url)))
        await until(lambda: len(transport._waiters) == 1 or second.done(), 5)
        assert not second.done() and server.connections == 1
        await first.aclose()
        response = await asyncio.wait_for(second, 5)
        assert await anext(aiter(response.iter_chunks())) == b"data: {}\n\n"
        await response.aclose()
    assert server.connections == 2


@on_both_loops
async def test_a_waiter_woken_then_cancelled_passes_its_turn_on() -> None:
    async def streams(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.request(reader)
        writer.write(SSE_HEAD + chunk(b"data: {}\n\n"))
        await reader.read()

    async with raw_server(streams) as server, h1(max_connections=1) as transport:
        holder = await transport.open(post(server.url))
        given_up = asyncio.create_task(transport.open(post(server.url)))
        waiting = asyncio.create_task(transport.open(post(server.url)))
        await until(lambda: len(transport._waiters) == 2, 5)  # both wait for the one connection
        await holder.aclose()  # frees the slot: the first waiter is woken...
        given_up.cancel()  # ...and gives up before it runs
        response = await asyncio.wait_for(waiting, 5)
        assert await anext(aiter(response.iter_chunks())) == b"data: {}\n\n"
        await response.aclose()
        assert given_up.cancelled()
    assert server.connections == 2


@on_both_loops
async def test_a_resting_answer_reads_nothing_then_goes_on_whole() -> None:
    events = [b"data: {%d}\n\n" % i for i in range(10)]

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.request(reader)
        writer.write(SSE_HEAD)
        for event in events:
            writer.write(chunk(event))
            await writer.drain()
            await asyncio.sleep(0.005)
        writer.write(b"0\r\n\r\n")
        await reader.read()

    async with raw_server(trickle) as server, h1() as transport:
        response = await transport.open(post(server.url))
        assert isinstance(response, H1Response)
        chunks = aiter(response.iter_chunks())
        first = await anext(chunks)
        conn = response._body.conn
        assert conn is not None and conn.transport is not None and conn.transport.is_reading()
        resting = asyncio.create_task(response.rest(0.1))
        await until(lambda: not conn.transport.is_reading(), 5, "the connection was read while it rested")
        assert not resting.done()
        await resting
        rest = b"".join([piece async for piece in chunks])
        await response.rest(10)  # the body is all in: returns at once
    assert first + rest == b"".join(events)


@on_both_loops
async def test_a_reader_far_behind_pauses_the_socket() -> None:
    big = bytes(range(256)) * 4096  # 1 MB

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.request(reader)
        writer.write(answer(big))
        await writer.drain()
        await reader.read()

    async with raw_server(flood) as server, h1() as transport:
        response = await transport.open(post(server.url))
        assert isinstance(response, H1Response)
        conn = response._body.conn
        assert conn is not None and conn.transport is not None
        await until(lambda: not conn.transport.is_reading(), 5, "the flood was read on unbounded")
        assert response._body._size < 2 * 256 * 1024
        assert await response.read() == big


@on_both_loops
async def test_the_default_transport_sends_plain_http_through_its_own_client() -> None:
    async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await server.request(reader) is not None:
            writer.write(answer(b"ok"))

    transport = DefaultTransport()
    try:
        async with raw_server(keep_alive) as server:
            response = await transport.open(post(server.url))
            assert isinstance(response, H1Response) and await response.read() == b"ok"
            port = free_port()
            with pytest.raises(UpstreamConnectError) as caught:  # https: through aiohttp
                await transport.open(post(f"https://127.0.0.1:{port}/v1"))
            assert caught.value.reason == f"refused the connection: nothing is listening on 127.0.0.1:{port}"
            assert transport.tls._session is not None
    finally:
        await transport.aclose()
    assert transport.tls._session is None and not transport.plain._open


def never_closes(server: Callable[[], RawServer], *extra: bytes, ended: list[int] | None = None) -> Handler:
    """A server that keeps every connection open as long as the client does; `ended` counts
    the connections the client closed."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await server().request(reader) is not None:
            writer.write(answer(b"ok", *extra))
            await asyncio.sleep(0.05)  # the answers overlap: one connection each
        if ended is not None:
            ended.append(1)

    return serve


@on_both_loops
async def test_idle_pooled_connections_are_closed_after_the_idle_timeout() -> None:
    ended: list[int] = []
    async with raw_server(never_closes(lambda: server, ended=ended)) as server:
        transport = H1Transport(idle_timeout=0.2)
        try:

            async def one() -> None:
                response = await transport.open(post(server.url))
                assert await response.read() == b"ok"

            await asyncio.gather(*(one() for _ in range(5)))
            assert transport.idle_connections() == 5 and server.connections == 5
            loop = asyncio.get_running_loop()
            idle_since = loop.time()
            await wait_until(lambda: len(ended) == 5, deadline=idle_since + 2)  # the server saw 5 closes
            assert loop.time() - idle_since >= 0.19  # not before their time
            assert transport.idle_connections() == 0
            assert not transport._open and transport._sweep is None  # nothing left, no timer
            await one()  # a new request opens a new connection
            assert server.connections == 6
        finally:
            await transport.aclose()


@on_both_loops
async def test_a_connection_idle_past_its_time_is_not_used_but_replaced() -> None:
    async with raw_server(never_closes(lambda: server)) as server, h1() as transport:
        response = await transport.open(post(server.url))
        await response.read()
        [conn] = transport._idle[next(iter(transport._idle))]
        conn.idle_until = asyncio.get_running_loop().time() - 1  # as if idle past its time
        response = await transport.open(post(server.url))
        assert await response.read() == b"ok"
        assert conn.closed and server.connections == 2 and transport.idle_connections() == 1


@on_both_loops
async def test_the_server_s_keep_alive_timeout_shortens_the_pool_s() -> None:
    async with raw_server(never_closes(lambda: server, b"Keep-Alive: timeout=5, max=100")) as server:
        async with h1() as transport:
            response = await transport.open(post(server.url))
            await response.read()
            [conn] = transport._idle[next(iter(transport._idle))]
            left = conn.idle_until - asyncio.get_running_loop().time()
            assert 3.5 < left <= 4.0  # the server's 5 s, less a second
    async with raw_server(never_closes(lambda: server, b"Keep-Alive: timeout=1")) as server:
        async with h1() as transport:
            response = await transport.open(post(server.url))
            await response.read()
            assert transport.idle_connections() == 0 and not transport._open  # not worth keeping


async def wait_until(condition: Callable[[], bool], deadline: float) -> None:
    loop = asyncio.get_running_loop()
    while not condition():
        assert loop.time() < deadline, "not within the deadline"
        await asyncio.sleep(0.01)
