"""The one seam between codexgate and the network: open an HTTP request, read its body.

Backends talk to upstreams only through `Transport`. Production uses `DefaultTransport`
(backends/http/h1.py): plain http:// upstreams through codexgate's own HTTP/1.1 client,
https:// ones through `AiohttpTransport`; tests plug in a transport that drives an ASGI app
in-process (tests/support/asgi_upstream.py).
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import aiohttp

from codexgate.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout


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


@dataclass(frozen=True, slots=True)
class BodyParts:
    """A request body as the pieces it is made of, in order, sent as they are (one vectored
    write): a chat request's history is the JSON a conversation keeps of its messages between
    turns (translate/chat_upstream/request.py), and joining it into one buffer would copy all
    of it once more per request (a 1 MB history: ~0.1 ms). `len()` is the body's size."""

    parts: tuple[bytes, ...]
    size: int

    @classmethod
    def of(cls, parts: Sequence[bytes]) -> BodyParts:
        return cls(tuple(parts), sum(map(len, parts)))

    def __len__(self) -> int:
        return self.size

    def joined(self) -> bytes:
        return b"".join(self.parts)


Body = bytes | BodyParts


def body_bytes(body: Body | None) -> bytes | None:
    """The body as one buffer (for what cannot take its pieces)."""
    return body.joined() if isinstance(body, BodyParts) else body


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One request to an upstream, as a transport sends it."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: Body | None
    connect_timeout: float  # seconds to connect (the answer's time is the caller's)


class Transport(Protocol):
    async def open(self, request: HttpRequest) -> UpstreamResponse:
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
            raise broken_connection(exc) from exc
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
            raise broken_connection(exc) from exc

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

    async def open(self, request: HttpRequest) -> UpstreamResponse:
        session = self._get_session()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=request.connect_timeout)
        try:
            resp = await session.request(
                request.method, request.url, headers=dict(request.headers), data=body_bytes(request.body),
                timeout=timeout,
            )  # fmt: skip
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise connection_failure(exc, request.url, request.connect_timeout) from exc
        return _AiohttpResponse(resp)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class ClosedBeforeAnswer(ConnectionError):
    """The server closed the connection before the answer's status line and headers were in."""


class ClosedMidAnswer(ConnectionError):
    """The server closed the connection before the body's end: a chunked body before its last
    chunk, a Content-Length body short of its length."""


class NotHttpAnswer(ConnectionError):
    """What the server sent does not parse as an HTTP/1.1 response."""


# -- the clients' errors in plain words: what failed, never the library's own message

_TLS_REASONS = {  # OpenSSL's reason codes a user meets, in words
    "WRONG_VERSION_NUMBER": "the server does not speak TLS on this port (is its URL http://, not https://?)",
    "RECORD_LAYER_FAILURE": "the server does not speak TLS on this port (is its URL http://, not https://?)",
    "UNSUPPORTED_PROTOCOL": "the server offers only TLS versions too old to use",
    "SSLV3_ALERT_HANDSHAKE_FAILURE": "the server and the gateway share no TLS cipher or version",
}


def connection_failure(exc: BaseException, url: str, connect_timeout: float) -> UpstreamError:
    """An attempt that got no answer, as the gateway's error: UpstreamTimeout for a connect
    timeout, else UpstreamConnectError (both retried before the first byte). Its `reason` says
    what failed in words that follow the upstream's name; its message adds the URL."""
    reason = failure_reason(exc, url, connect_timeout)
    error: UpstreamError = (UpstreamTimeout if isinstance(exc, TimeoutError) else UpstreamConnectError)(
        f"{url} {reason}"
    )
    error.reason = reason
    return error


def broken_connection(exc: BaseException) -> UpstreamConnectError:
    """A connection that broke while the answer was being read."""
    reason = failure_reason(exc, "", 0)
    error = UpstreamConnectError(f"the upstream {reason}")
    error.reason = reason
    return error


def failure_reason(exc: BaseException, url: str, connect_timeout: float) -> str:
    """What failed, from the exception's type and error number, never from its prose:
    "refused the connection: nothing is listening on 127.0.0.1:8000"."""
    parts = urlsplit(url)
    host = parts.hostname or "the host"
    address = f"{host}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
    os_error = getattr(exc, "os_error", None)
    if os_error is None and isinstance(exc, OSError):
        os_error = exc  # codexgate's own client raises the socket's errors as they are
    number = getattr(exc, "errno", None)
    if isinstance(exc, TimeoutError):
        return f"did not accept a connection within {connect_timeout:g} s (connect_timeout)"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        verify = getattr(exc.certificate_error, "verify_message", None)
        return f"failed the TLS certificate check: {verify or 'the certificate is not trusted'}"
    if isinstance(exc, aiohttp.ClientSSLError):
        code = str(getattr(os_error, "reason", "") or "")
        said = _TLS_REASONS.get(code, code.lower().replace("_", " ") or "no reason given")
        return f"failed the TLS handshake: {said}"
    if isinstance(exc, aiohttp.ClientConnectorDNSError) or isinstance(os_error, socket.gaierror):
        return f"could not be found: the host name {host} does not resolve (DNS)"
    if number == errno.ECONNREFUSED or isinstance(os_error, ConnectionRefusedError):
        return f"refused the connection: nothing is listening on {address}"
    if number in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return f"could not be reached: there is no route to {host}"
    if number == errno.ECONNRESET or _reset(exc) or isinstance(os_error, ConnectionResetError):
        return "reset the connection"
    if isinstance(exc, aiohttp.ServerDisconnectedError | ClosedBeforeAnswer):
        return "closed the connection without answering"
    if isinstance(exc, aiohttp.ClientPayloadError | ClosedMidAnswer):
        return "closed the connection mid-answer"
    if isinstance(exc, aiohttp.ClientResponseError | NotHttpAnswer):
        return "answered with something that is not HTTP"
    return f"could not be reached ({getattr(exc, 'strerror', None) or type(exc).__name__})"


def _reset(exc: BaseException | None) -> bool:
    """A connection reset, or an error caused by one."""
    while exc is not None:
        if isinstance(exc, ConnectionResetError):
            return True
        exc = exc.__cause__
    return False
