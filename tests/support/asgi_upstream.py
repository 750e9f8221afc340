"""`ASGIUpstreamTransport`: codexgate's upstream `Transport`, served by an in-process ASGI app.

Backend tests plug this in instead of `AiohttpTransport` so the gateway talks to a
`FakeUpstream` without sockets: fast, deterministic, and still truly streaming (see
`_exchange.ASGIExchange` for the exact semantics). Failures map onto the same exceptions the
production transport raises, so the gateway's error handling is exercised as in production:

* no app / `fail_connect` -> `UpstreamConnectError` from `open()`;
* `connect_delay` longer than the caller's `connect_timeout` -> `UpstreamTimeout`;
* the app crashing before its headers -> `UpstreamConnectError` from `open()`;
* the body ending without `more_body=False` -> `UpstreamConnectError` from `iter_chunks()`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from multidict import CIMultiDict, CIMultiDictProxy

from codexgate.backends.http.transport import HttpRequest, body_bytes
from codexgate.errors import UpstreamConnectError, UpstreamTimeout

from ._exchange import (
    DEFAULT_OPTIONS,
    AppFailedBeforeStart,
    ASGIApp,
    ASGIExchange,
    BodyIncomplete,
    ExchangeOptions,
    build_http_scope,
)


class ASGIUpstreamResponse:
    """An `UpstreamResponse` whose body streams from the app as it sends it."""

    def __init__(self, exchange: ASGIExchange, url: str) -> None:
        self._exchange = exchange
        self.url = url
        self.status = exchange.status
        # Case-insensitive like aiohttp's response headers (which are a CIMultiDictProxy too).
        self.headers: CIMultiDictProxy[str] = CIMultiDictProxy(
            CIMultiDict((name.decode("latin-1"), value.decode("latin-1")) for name, value in exchange.headers)
        )

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._exchange.body():
                yield chunk
        except BodyIncomplete as exc:
            raise UpstreamConnectError(f"upstream connection broke: {exc}") from (exc.app_error or exc)

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_chunks()])

    async def rest(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def aclose(self) -> None:
        await self._exchange.aclose()

    @property
    def closed(self) -> bool:
        """`aclose()` was called (by the gateway or by `ASGIUpstreamTransport.aclose()`)."""
        return self._exchange.closed

    @property
    def app_running(self) -> bool:
        """The app is still producing this response."""
        return self._exchange.running

    @property
    def disconnected(self) -> bool:
        """The response was closed before the app finished it (the app saw a disconnect)."""
        return self._exchange.disconnected

    @property
    def forced_cancel(self) -> bool:
        """The app ignored the disconnect and had to be cancelled."""
        return self._exchange.forced_cancel

    @property
    def app_error(self) -> BaseException | None:
        return self._exchange.app_error


class ASGIUpstreamTransport:
    """In-process `codexgate.backends.http.transport.Transport` over an ASGI app.

    `app=None` behaves like an unreachable host. Attributes are meant to be poked by tests:
    `fail_connect` and `connect_delay` may change between requests; `opened` counts requests
    that reached the app; `responses` keeps every response handed out (to assert they were all
    closed: `all(r.closed for r in transport.responses)`, or at least finished:
    `not any(r.app_running for r in transport.responses)`).
    """

    def __init__(
        self,
        app: ASGIApp | None,
        *,
        fail_connect: bool = False,
        connect_delay: float = 0.0,
        options: ExchangeOptions = DEFAULT_OPTIONS,
    ) -> None:
        self.app = app
        self.fail_connect = fail_connect
        self.connect_delay = connect_delay
        self.options = options
        self.opened = 0
        self.responses: list[ASGIUpstreamResponse] = []

    async def open(self, request: HttpRequest) -> ASGIUpstreamResponse:
        method, url, headers, body, connect_timeout = (
            request.method,
            request.url,
            request.headers,
            body_bytes(request.body),
            request.connect_timeout,
        )
        if self.connect_delay:
            await asyncio.sleep(min(self.connect_delay, connect_timeout))
            if self.connect_delay > connect_timeout:
                raise UpstreamTimeout(f"connecting to {url} timed out")
        if self.app is None or self.fail_connect:
            raise UpstreamConnectError(f"cannot reach upstream {url}: connection refused (simulated)")

        parts = urlsplit(url)
        raw_headers = [
            (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()
        ]
        present = {name for name, _ in raw_headers}
        if b"host" not in present:
            raw_headers.insert(0, (b"host", parts.netloc.encode("latin-1")))
        if body is not None and b"content-length" not in present:
            raw_headers.append((b"content-length", str(len(body)).encode()))
        scope = build_http_scope(
            method=method,
            scheme=parts.scheme or "http",
            host=parts.hostname or "upstream",
            port=parts.port,
            raw_path=parts.path.encode("latin-1"),
            query_string=parts.query.encode("latin-1"),
            headers=raw_headers,
        )
        exchange = ASGIExchange(self.app, scope, body or b"", self.options)
        self.opened += 1
        try:
            await exchange.start()
        except AppFailedBeforeStart as exc:
            raise UpstreamConnectError(f"upstream connection broke before the headers: {exc}") from (
                exc.app_error or exc
            )
        response = ASGIUpstreamResponse(exchange, url)
        self.responses.append(response)
        return response

    async def aclose(self) -> None:
        """Abort every response still running (as closing a connection pool would)."""
        for response in self.responses:
            await response.aclose()
