"""The one seam between codexgate and the network: open an HTTP request, read its body.

Backends talk to upstreams only through `Transport`. Production uses `AiohttpTransport`;
tests plug in a transport that drives an ASGI app in-process (tests/support/asgi_upstream.py).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from typing import Protocol

import aiohttp

from codexgate.errors import UpstreamConnectError, UpstreamTimeout


class UpstreamResponse(Protocol):
    status: int
    headers: Mapping[str, str]

    def iter_chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive (any split). Raises UpstreamConnectError if the
        connection breaks mid-body."""
        ...

    async def read(self) -> bytes:
        """The whole body."""
        ...

    async def rest(self, seconds: float) -> None:
        """Read nothing from the connection for `seconds`: what the upstream sends meanwhile
        waits in the socket and comes in one read (one wake-up instead of one per event)."""
        ...

    async def aclose(self) -> None:
        """Release the connection; safe to call twice. Closing early aborts the request."""
        ...


async def read_capped(response: UpstreamResponse, limit: int) -> tuple[bytes, bool]:
    """The first `limit` bytes of the body, and whether there was more. Reading stops at the
    limit, so an endless or huge body costs `limit` bytes, not its size; the caller closes
    the response. Raises UpstreamConnectError if the connection breaks."""
    pieces: list[bytes] = []
    size = 0
    async with aclosing(response.iter_chunks()) as chunks:  # type: ignore[type-var]
        async for chunk in chunks:
            pieces.append(chunk)
            size += len(chunk)
            if size > limit:
                return b"".join(pieces)[:limit], True
    return b"".join(pieces), False


class Transport(Protocol):
    async def open(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        connect_timeout: float,
    ) -> UpstreamResponse:
        """Send a request and return once the status line and headers are in.

        Raises UpstreamConnectError when no connection could be made or it broke before
        the headers, UpstreamTimeout when connecting took longer than connect_timeout.
        """
        ...

    async def aclose(self) -> None: ...


class _Chunks:
    """The body as it arrives: each step one `readany()`, with the errors mapped. A plain
    iterator rather than an async generator around aiohttp's own: every upstream chunk of a
    stream passes here, and each of those layers was a frame to resume per chunk."""

    __slots__ = ("_content",)

    def __init__(self, content: aiohttp.StreamReader) -> None:
        self._content = content

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self._content.readany()
        except aiohttp.EofStream:
            raise StopAsyncIteration from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise UpstreamConnectError(f"upstream connection broke: {exc!r}") from exc
        if not chunk:
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        """Nothing to release (the response is closed by its owner); for `aclosing`."""


class _AiohttpResponse:
    __slots__ = ("_resp", "status", "headers")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status = resp.status
        self.headers: Mapping[str, str] = resp.headers

    def iter_chunks(self) -> AsyncIterator[bytes]:
        return _Chunks(self._resp.content)

    async def read(self) -> bytes:
        try:
            return await self._resp.read()
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise UpstreamConnectError(f"upstream connection broke: {exc!r}") from exc

    async def rest(self, seconds: float) -> None:
        connection = self._resp.connection
        protocol = connection.protocol if connection is not None else None
        if protocol is None or protocol.transport is None:
            return  # the body is all in already: waiting would only delay it
        # The protocol's own pause, so that aiohttp's flow control knows the socket is paused.
        protocol.pause_reading()
        try:
            await asyncio.sleep(seconds)
        finally:
            if protocol.transport is not None:
                protocol.resume_reading()

    async def aclose(self) -> None:
        # close() (not release()) so an unfinished upstream generation is cancelled.
        if not self._resp.closed:
            self._resp.close()


def _nodelay_socket(addr_info: tuple) -> socket.socket:  # type: ignore[type-arg]
    """Upstream sockets with TCP_NODELAY: small writes on a reused connection otherwise wait
    ~40 ms for Nagle's algorithm and the peer's delayed ACK."""
    family, type_, proto, _, _ = addr_info
    sock = socket.socket(family=family, type=type_, proto=proto)
    if family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class AiohttpTransport:
    """Pooled keep-alive connections to every upstream, created lazily on the running loop."""

    def __init__(self, max_connections: int = 1000) -> None:
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections, ttl_dns_cache=300, socket_factory=_nodelay_socket
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None),
                auto_decompress=True,
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def open(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        connect_timeout: float,
    ) -> UpstreamResponse:
        session = self._get_session()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout)
        try:
            resp = await session.request(method, url, headers=dict(headers), data=body, timeout=timeout)
        except TimeoutError as exc:
            raise UpstreamTimeout(f"connecting to {url} timed out") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamConnectError(f"cannot reach upstream {url}: {exc}") from exc
        return _AiohttpResponse(resp)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
