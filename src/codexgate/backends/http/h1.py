"""codexgate's own HTTP/1.1 client, for plain http:// upstreams; `DefaultTransport` picks it.

Local model servers (Ollama, llama.cpp, vLLM...) answer over plain HTTP on the same machine or
network, where the gateway's own CPU is what a request costs: through aiohttp, sending a 60 KB
request took ~210 µs of CPU (its request and connector machinery), and each chunk of the
answer went through its StreamReader. Here the request's head is built once as bytes and
written with its body in one call, and each read of the socket is parsed by httptools (C) and
handed to the reader with one await. https:// upstreams stay on aiohttp: TLS and the network's
latency dwarf that cost there.

A connection idle in the pool is closed after `idle_timeout` seconds (30 by default), or
sooner when the server says when it closes (`Keep-Alive: timeout=N`: then 1 s before that,
so that no request is sent on a connection the server is closing). A server that never closes
idle connections would otherwise keep a descriptor open on both sides for each connection of
the busiest moment. One timer serves the whole pool: a sweep, at most once a second while
connections are idle, and a connection past its time is closed, not used, when taken.
"""

from __future__ import annotations

import asyncio
import base64
import re
import socket
import zlib
from collections import deque
from collections.abc import Coroutine, Mapping
from typing import Any, cast
from urllib.parse import unquote, urlsplit

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

from codexgate import timeouts
from codexgate.backends.http.transport import (
    AiohttpTransport,
    Body,
    BodyParts,
    ClosedBeforeAnswer,
    ClosedMidAnswer,
    HttpRequest,
    NotHttpAnswer,
    UpstreamResponse,
    broken_connection,
    connection_failure,
)

__all__ = ["DefaultTransport", "H1Transport"]

_HIGH_WATER = 256 * 1024  # body bytes buffered unread before the socket is paused
# One write of head + body copies the body once; writelines() hands both to writev without the
# copy but costs more per call. Measured on uvloop: the copy is cheaper up to ~100 KB (60 KB:
# 21 vs 23 µs), writev beyond (1 MB: 101 vs 131 µs).
_CONCAT_UP_TO = 100_000
_NOT_FORWARDED = frozenset({"host", "content-length", "transfer-encoding", "accept-encoding"})
# Seconds a connection may stay idle in the pool (H1Transport's `idle_timeout`); a server's
# own Keep-Alive timeout, less _BEFORE_THE_SERVER, when it is shorter.
IDLE_TIMEOUT = 30.0
_BEFORE_THE_SERVER = 1.0
_SWEEP_EVERY = 1.0  # at most; the idle timeout when it is shorter
_KEEP_ALIVE_TIMEOUT = re.compile(r"(?:^|[,;\s])timeout\s*=\s*(\d+(?:\.\d+)?)", re.IGNORECASE)
_Key = tuple[str, int]
_STREAM = socket.SOCK_STREAM
_Head = tuple[int, "CIMultiDictProxy[str]"]  # an answer's status and headers


class _Target:
    """What a URL gives every request to it, worked out once: the pool's key and the head's
    text after the method."""

    __slots__ = ("key", "host", "request_line")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or 80
        self.key: _Key = (host, port)
        named = f"[{host}]" if ":" in host else host
        self.host = f"Host: {named}:{port}\r\n" if parts.port else f"Host: {named}\r\n"
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.request_line = f" {path} HTTP/1.1\r\n"
        if parts.username is not None:  # http://user:pass@host/ as aiohttp sends it
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            self.request_line += f"Authorization: Basic {base64.b64encode(pair).decode()}\r\n"


def _head(request: HttpRequest, target: _Target) -> bytes:
    """The request line and headers as bytes: the caller's headers, then Content-Length and
    Accept-Encoding: identity (a local server's answer is not worth compressing). No
    User-Agent, as aiohttp was told. Raises ValueError for a line break in a header."""
    host = target.host
    lines = []
    for name, value in request.headers.items():
        lowered = name.lower()
        if lowered in _NOT_FORWARDED:
            if lowered == "host":
                host = f"Host: {value}\r\n"
            continue
        lines.append(f"{name}: {value}\r\n")
    if request.body is not None or request.method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(request.body or b'')}\r\n")
    lines.append("Accept-Encoding: identity\r\n")
    fields = host + "".join(lines)
    if fields.count("\n") != len(lines) + 1 or fields.count("\r") != len(lines) + 1:
        raise ValueError("an upstream request header holds a line break")
    return f"{request.method}{target.request_line}{fields}\r\n".encode()


class _Body:
    """An answer's body as its connection receives it, and its reader. `iter_chunks()` is this
    object itself, so a chunk costs one await: no generator or StreamReader in between."""

    __slots__ = ("conn", "_pieces", "_size", "_waiter", "_done", "_error")

    def __init__(self, conn: _Connection) -> None:
        self.conn: _Connection | None = conn  # None once the body ended (or was given up)
        self._pieces: list[bytes] = []
        self._size = 0
        self._waiter: asyncio.Future[None] | None = None
        self._done = False
        self._error: BaseException | None = None

    def feed(self, data: bytes) -> None:
        self._pieces.append(data)
        self._size += len(data)
        if self._size > _HIGH_WATER and self.conn is not None:
            self.conn.hold(full=True)  # the reader is behind: let the kernel hold the rest
        self._wake()

    def finish(self, error: BaseException | None) -> None:
        """The body ended: whole (None) or cut (the reader raises after the bytes before)."""
        self.conn = None
        self._done, self._error = True, error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        while not self._pieces:
            if self._done:
                if self._error is not None:
                    raise broken_connection(self._error) from self._error
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        pieces = self._pieces
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        pieces.clear()
        if self._size > _HIGH_WATER and self.conn is not None:
            self.conn.hold(full=False)
        self._size = 0
        return data

    async def aclose(self) -> None:
        """Nothing to release (the response is closed by its owner); for `aclosing`."""


class _Connection(asyncio.Protocol):
    """One keep-alive TCP connection: writes a request, parses the answer with httptools and
    feeds its body to the request's `_Body`; back to its pool when an answer ended whole."""

    def __init__(self, pool: H1Transport, key: _Key) -> None:
        self.pool, self.key = pool, key
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False  # served a request before (a dead one is retried once)
        self.answered = False  # a byte of the current answer arrived (never retried then)
        self.server_keeps: float | None = None  # the seconds of the server's Keep-Alive timeout
        self.idle_until = 0.0  # in the pool: the loop time past which it is closed, not used
        self.body: _Body | None = None
        self._head: asyncio.Future[_Head] | None = None  # done when status and headers are in
        self._parser = httptools.HttpResponseParser(self)
        self._fields: list[tuple[str, str]] = []
        self._head_only = self._interim = self._until_close = False
        self._encoding: str | None = None
        self._decoder: zlib._Decompress | None = None
        self._full = self._resting = False
        self._error: BaseException | None = None

    def begin(self, head_only: bool) -> tuple[asyncio.Future[_Head], _Body]:
        """Ready for a request's answer: the future of its status and headers, and its body."""
        self.answered, self._head_only = False, head_only
        body = self.body = _Body(self)
        head = self._head = asyncio.get_running_loop().create_future()
        return head, body

    def write_request(self, head: bytes, body: Body | None) -> None:
        """The request in one write (bench/request_cpu.py notes the time it is called)."""
        transport = self.transport
        assert transport is not None
        if body is None:
            transport.write(head)
            return
        pieces = body.parts if isinstance(body, BodyParts) else (body,)
        if len(body) <= _CONCAT_UP_TO:
            transport.write(b"".join((head, *pieces)))
        else:
            transport.writelines((head, *pieces))

    def is_usable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def hold(self, *, full: bool | None = None, resting: bool | None = None) -> None:
        """Pause reading the socket while the reader is behind or resting; resume when neither."""
        if full is not None:
            self._full = full
        if resting is not None:
            self._resting = resting
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._full or self._resting:
            transport.pause_reading()
        else:
            transport.resume_reading()

    def close(self) -> None:
        """Close the socket (the upstream sees it and stops generating); its slot is free."""
        body, self.body = self.body, None
        if body is not None:
            body.finish(None)  # given up by its reader: nothing more is read
        if self._head is not None and not self._head.done():
            self._head.cancel()  # no one waits for it any more
        if self.transport is not None:
            self.transport.close()
        self._forget()

    def _forget(self) -> None:
        if not self.closed:
            self.closed = True
            self.pool.forget(self)

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is one, unregistered

    def data_received(self, data: bytes) -> None:
        self.answered = True
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._error = NotHttpAnswer(str(exc))
            self._error.__cause__ = exc
            if self.transport is not None:
                self.transport.abort()

    def eof_received(self) -> None:
        return None  # the transport closes itself; connection_lost() tells what it cut

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        error = self._error or exc
        head, body = self._head, self.body
        self.body = None
        if head is not None and not head.done():
            head.set_exception(error or ClosedBeforeAnswer())
        elif body is not None:
            if error is None and self._until_close:
                self._flush(body)  # a body without length or chunks ends with the connection
                body.finish(None)
            else:
                body.finish(error or ClosedMidAnswer())

    # -- httptools' callbacks

    def on_message_begin(self) -> None:
        if self.body is None:
            raise NotHttpAnswer("bytes from the server with no request in flight")
        self._fields = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            self._interim = True  # 100 Continue and the like: the answer follows
            return
        headers = CIMultiDictProxy(CIMultiDict(self._fields))
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self._until_close = not chunked and "content-length" not in headers and status not in (204, 304)
        keep_alive = headers.get("keep-alive")
        if keep_alive is not None:
            found = _KEEP_ALIVE_TIMEOUT.search(keep_alive)
            self.server_keeps = float(found.group(1)) if found else None
        encoding = headers.get("content-encoding", "").strip().lower()
        self._encoding = encoding if encoding in ("gzip", "deflate") else None
        self._decoder = None
        if self._head is not None and not self._head.done():
            self._head.set_result((status, headers))
        if self._head_only:  # the parser cannot know a HEAD answer has no body: end it here
            body, self.body = self.body, None
            if body is not None:
                body.finish(None)
            if self.transport is not None:
                self.transport.close()

    def on_body(self, data: bytes) -> None:
        if self._encoding is not None:
            data = self._decode(data)
            if not data:
                return
        if self.body is not None:
            self.body.feed(data)

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        body, self.body = self.body, None
        if body is None:
            return
        self._flush(body)
        if self._parser.should_keep_alive() and not self._until_close:
            self.pool.release(self)  # before the reader wakes: the connection is free now
        elif self.transport is not None:
            self.transport.close()
        body.finish(None)

    def _decode(self, data: bytes) -> bytes:
        """A compressed body, decoded although we asked for none. "deflate" is meant as zlib's
        format, but some servers send raw deflate: the first byte tells."""
        decoder = self._decoder
        if decoder is None:
            raw = self._encoding == "deflate" and data[0] & 0x0F != 8
            decoder = self._decoder = zlib.decompressobj(-zlib.MAX_WBITS if raw else 32 + zlib.MAX_WBITS)
        return decoder.decompress(data)

    def _flush(self, body: _Body) -> None:
        if self._decoder is not None:
            tail = self._decoder.flush()
            if tail:
                body.feed(tail)


class H1Response:
    """An answer over an `_Connection`: status, headers, and the body as it arrives."""

    __slots__ = ("status", "headers", "_body")

    def __init__(self, head: _Head, body: _Body) -> None:
        self.status: int = head[0]
        self.headers: Mapping[str, str] = head[1]
        self._body = body

    def iter_chunks(self) -> _Body:
        return self._body

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self._body])

    async def rest(self, seconds: float) -> None:
        conn = self._body.conn
        if conn is None:
            return  # the body is all in already: waiting would only delay it
        conn.hold(resting=True)
        try:
            await asyncio.sleep(seconds)
        finally:
            if self._body.conn is conn:  # else it went back to the pool, reading again
                conn.hold(resting=False)

    async def aclose(self) -> None:
        conn = self._body.conn
        if conn is not None:  # the body did not end: the upstream must stop generating
            conn.close()


class H1Transport:
    """Keep-alive connections to plain http:// upstreams, pooled per (host, port), at most
    `max_connections` open in all (a request beyond waits for one), none idle longer than
    `idle_timeout` seconds (or the server's own keep-alive timeout, less a second)."""

    def __init__(self, max_connections: int = 1000, idle_timeout: float = IDLE_TIMEOUT) -> None:
        self._limit = max_connections
        self._idle_timeout = idle_timeout
        self._sweep_every = min(_SWEEP_EVERY, idle_timeout)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: dict[_Key, list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._targets: dict[str, _Target] = {}
        self._sweep: asyncio.TimerHandle | None = None  # armed while connections are idle

    async def open(self, request: HttpRequest) -> UpstreamResponse:
        target = self._targets.get(request.url)
        if target is None:
            if len(self._targets) >= 256:
                self._targets.clear()
            target = self._targets[request.url] = _Target(request.url)
        head = _head(request, target)
        if asyncio.get_running_loop() is not self._loop:
            self._restart()
        for attempt in range(2):
            try:
                conn = await self._acquire(target.key, request.connect_timeout)
            except OSError as exc:  # TimeoutError included
                raise connection_failure(exc, request.url, request.connect_timeout) from exc
            try:
                answer, body = conn.begin(head_only=request.method == "HEAD")
                if not conn.is_usable():
                    raise ClosedBeforeAnswer()
                conn.write_request(head, request.body)
                return H1Response(await answer, body)
            except OSError as exc:
                conn.close()
                if attempt == 0 and conn.reused and not conn.answered:
                    continue  # the server closed it while idle: once more on a fresh one
                raise connection_failure(exc, request.url, request.connect_timeout) from exc
            except BaseException:
                conn.close()  # cancelled: the upstream must not go on generating
                raise
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        self._stop_sweeping()
        for conn in list(self._open):
            conn.close()
        self._idle.clear()

    def idle_connections(self) -> int:
        """How many connections wait in the pool for a request."""
        return sum(len(idle) for idle in self._idle.values())

    # -- the pool

    def release(self, conn: _Connection) -> None:
        """A connection whose answer ended whole, ready for the next request (for as long as
        it may stay idle)."""
        keep = self._idle_timeout
        if conn.server_keeps is not None:
            keep = min(keep, conn.server_keeps - _BEFORE_THE_SERVER)
        if keep <= 0:
            conn.close()  # the server closes it at once, or nearly: not worth a request
            return
        conn.reused = True
        conn.hold(full=False, resting=False)  # read, to see the server close it while idle
        loop = self._loop or asyncio.get_running_loop()
        conn.idle_until = loop.time() + keep
        self._idle.setdefault(conn.key, []).append(conn)
        if self._sweep is None:
            self._sweep = loop.call_later(max(keep, self._sweep_every), self._close_expired)
        self._wake_one()

    def _close_expired(self) -> None:
        """The sweep: every idle connection past its time is closed; armed again for the next
        one to expire (at least `_sweep_every` later) while any are idle."""
        self._sweep = None
        loop = self._loop or asyncio.get_running_loop()
        now = loop.time()
        earliest: float | None = None
        for idle in list(self._idle.values()):
            for conn in list(idle):
                if conn.idle_until <= now:
                    conn.close()  # forget() takes it out of the pool
                elif earliest is None or conn.idle_until < earliest:
                    earliest = conn.idle_until
        if earliest is not None:
            self._sweep = loop.call_at(max(earliest, now + self._sweep_every), self._close_expired)

    def _stop_sweeping(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

    def forget(self, conn: _Connection) -> None:
        """A connection closed: out of the pool, its slot free."""
        self._open.discard(conn)
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)
        self._wake_one()

    async def _acquire(self, key: _Key, connect_timeout: float) -> _Connection:
        while True:
            idle = self._idle.get(key)
            if idle:
                now = (self._loop or asyncio.get_running_loop()).time()
            while idle:
                conn = idle.pop()  # the most recent: the least likely to be closed by now
                if conn.is_usable() and now < conn.idle_until:
                    return conn
                conn.close()
            if len(self._open) < self._limit or self._close_one_idle():
                return await self._connect(key, connect_timeout)
            await self._wait_for_slot()

    def _close_one_idle(self) -> bool:
        """Room for a new connection at the limit: the oldest idle one to another upstream."""
        for idle in self._idle.values():
            if idle:
                idle[0].close()
                return True
        return False

    async def _wait_for_slot(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._wake_one()  # woken, then cancelled: the turn passes on
            else:
                self._waiters.remove(waiter)
            raise

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _connect(self, key: _Key, connect_timeout: float) -> _Connection:
        """A new connection, each of the host's addresses in turn; the last one's error."""
        loop = asyncio.get_running_loop()
        conn = _Connection(self, key)
        self._open.add(conn)
        try:
            with timeouts.timeout(connect_timeout):
                host, port = key
                try:  # an IP address needs no resolver (a thread's round trip)
                    infos = socket.getaddrinfo(host, port, type=_STREAM, flags=socket.AI_NUMERICHOST)
                except socket.gaierror:
                    infos = await loop.getaddrinfo(host, port, type=_STREAM)
                error: OSError = ConnectionRefusedError()
                for family, kind, proto, _, address in infos:
                    sock = socket.socket(family, kind, proto)
                    try:
                        sock.setblocking(False)
                        # Without it a small write on a reused connection waits ~40 ms for
                        # Nagle's algorithm and the peer's delayed ACK.
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        await loop.sock_connect(sock, address)
                    except OSError as exc:
                        sock.close()
                        error = exc
                        continue
                    except BaseException:
                        sock.close()
                        raise
                    await loop.create_connection(lambda: conn, sock=sock)
                    return conn
                raise error
        except BaseException:
            conn.close()
            raise

    def _restart(self) -> None:
        """On another event loop than before (a new app in the same process): the old loop's
        connections cannot be used from this one; they are left to it."""
        self._loop = asyncio.get_running_loop()
        self._idle.clear()
        self._open.clear()
        self._waiters.clear()
        self._stop_sweeping()  # the old loop's timer


class DefaultTransport:
    """The gateway's transport: http:// URLs through `H1Transport`, the rest (https://) through
    `AiohttpTransport`."""

    def __init__(self, max_connections: int = 1000, idle_timeout: float = IDLE_TIMEOUT) -> None:
        self.plain = H1Transport(max_connections, idle_timeout)
        self.tls = AiohttpTransport(max_connections)

    def open(self, request: HttpRequest) -> Coroutine[Any, Any, UpstreamResponse]:
        # Not async: the chosen transport's coroutine is handed on, one frame fewer per request.
        if request.url.startswith("http://"):
            return self.plain.open(request)
        return self.tls.open(request)

    async def aclose(self) -> None:
        try:
            await self.plain.aclose()
        finally:
            await self.tls.aclose()
