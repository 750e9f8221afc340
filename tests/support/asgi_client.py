"""`StreamingASGITransport`: httpx (and the openai SDK) talking to an ASGI app in-process.

httpx's own `ASGITransport` runs the app to completion and buffers the body, so an SSE stream
arrives all at once and a client cannot disconnect mid-stream. This transport hands the
response to httpx as soon as the app sent its headers and yields body chunks as the app sends
them; closing the response early is a client disconnect (the app's `receive()` answers
`http.disconnect`), after which the app gets `disconnect_grace` seconds (2 unless `options`
says otherwise) to return before it is cancelled. Semantics are uvicorn's, see
`_exchange.ASGIExchange` and `_exchange.ExchangeOptions`.

    transport = StreamingASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        async with client.stream("POST", "/v1/responses", json=...) as response:
            async for line in response.aiter_lines(): ...

    openai.AsyncOpenAI(base_url="http://gw/v1", api_key="x",
                       http_client=httpx.AsyncClient(transport=transport))

`asgi_lifespan(app)` runs the app's startup/shutdown around a test; pass the state it yields
as `StreamingASGITransport(app, state=...)` so requests see it in `scope["state"]`.

Timeouts in httpx's request extensions are not enforced here: bound waits in tests with
`asyncio.timeout`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from ._exchange import (
    AppFailedBeforeStart,
    ASGIApp,
    ASGIExchange,
    BodyIncomplete,
    ExchangeOptions,
    build_http_scope,
)

# Client side: an app gets 2 s (not 1 s, as upstream) to return after the client left.
CLIENT_OPTIONS = ExchangeOptions(disconnect_grace=2.0)


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(
        self, transport: StreamingASGITransport, exchange: ASGIExchange, request: httpx.Request
    ) -> None:
        self._transport = transport
        self._exchange = exchange
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._exchange.body():
                yield chunk
        except BodyIncomplete as exc:
            if exc.app_error is not None and self._transport.raise_app_exceptions:
                raise exc.app_error from None
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body",
                request=self._request,
            ) from exc

    async def aclose(self) -> None:
        await self._transport._finish(self._exchange)


class StreamingASGITransport(httpx.AsyncBaseTransport):
    """An httpx transport that streams an in-process ASGI app's response.

    `raise_app_exceptions`: an exception the app raises before its headers propagates from the
    request (else: a 500 response), one raised mid-body propagates from the body iteration
    (else: `httpx.RemoteProtocolError`, what a real server closing the connection gives).
    One raised after the response completed, or after the client closed it, is only recorded.
    `app_errors` collects every exception the app raised, including after an early close;
    `forced_cancellations` counts apps that had to be cancelled because they ignored a
    disconnect. Tests of well-behaved apps assert both stay empty / zero.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        raise_app_exceptions: bool = True,
        client: tuple[str, int] = ("127.0.0.1", 50000),
        root_path: str = "",
        state: dict[str, Any] | None = None,
        options: ExchangeOptions = CLIENT_OPTIONS,
    ) -> None:
        self.app = app
        self.raise_app_exceptions = raise_app_exceptions
        self.client = client
        self.root_path = root_path
        self.state = state
        self.options = options
        self.app_errors: list[BaseException] = []
        self.forced_cancellations = 0
        self._open: set[ASGIExchange] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        body: bytes | AsyncIterable[bytes]
        try:
            body = request.content
        except httpx.RequestNotRead:
            assert isinstance(request.stream, AsyncIterable)
            body = request.stream
        scope = build_http_scope(
            method=request.method,
            scheme=url.scheme,
            host=url.host,
            port=url.port,
            raw_path=url.raw_path.split(b"?", 1)[0],
            query_string=url.query,
            headers=list(request.headers.raw),
            client=self.client,
            root_path=self.root_path,
            state=self.state,
        )
        exchange = ASGIExchange(self.app, scope, body, self.options)
        self._open.add(exchange)
        try:
            await exchange.start()
        except AppFailedBeforeStart as exc:
            await self._finish(exchange)
            if exc.app_error is not None and self.raise_app_exceptions:
                raise exc.app_error from None
            return httpx.Response(
                500,
                headers=[(b"content-type", b"text/plain; charset=utf-8")],
                content=b"Internal Server Error",
                request=request,
            )
        except BaseException:
            await self._finish(exchange)
            raise
        return httpx.Response(
            exchange.status,
            headers=exchange.headers,
            stream=_ResponseStream(self, exchange, request),
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def _finish(self, exchange: ASGIExchange) -> None:
        if exchange not in self._open:
            return
        self._open.discard(exchange)
        await exchange.aclose()
        if exchange.forced_cancel:
            self.forced_cancellations += 1
        if exchange.app_error is not None:
            self.app_errors.append(exchange.app_error)

    async def aclose(self) -> None:
        """Disconnect every response still open (the client is closing its pool)."""
        for exchange in list(self._open):
            await self._finish(exchange)


@asynccontextmanager
async def asgi_lifespan(app: ASGIApp, *, timeout: float = 10.0) -> AsyncIterator[dict[str, Any]]:
    """Run the app's lifespan startup, yield its state dict, run shutdown on exit.

    An app that does not speak lifespan (it raises on the scope) is tolerated, as uvicorn's
    `lifespan="auto"` does; a `lifespan.startup.failed` raises RuntimeError.
    """
    state: dict[str, Any] = {}
    scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": state}
    to_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    from_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def send(message: Any) -> None:
        await from_app.put(dict(message))

    async def run() -> None:
        await app(scope, to_app.get, send)

    task = asyncio.create_task(run(), name="asgi-lifespan")

    async def exchange(message: str) -> dict[str, Any] | None:
        await to_app.put({"type": message})
        reply = asyncio.ensure_future(from_app.get())
        try:
            async with asyncio.timeout(timeout):
                await asyncio.wait({reply, task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not reply.done():
                reply.cancel()
        return reply.result() if reply.done() and not reply.cancelled() else None

    try:
        started = await exchange("lifespan.startup")
        if started is not None and started["type"] == "lifespan.startup.failed":
            raise RuntimeError(f"ASGI lifespan startup failed: {started.get('message', '')}")
    except BaseException:
        task.cancel()
        await asyncio.wait({task})
        raise
    try:
        yield state
    finally:
        if started is not None and not task.done():
            stopped = await exchange("lifespan.shutdown")
            if stopped is not None and stopped["type"] == "lifespan.shutdown.failed":
                raise RuntimeError(f"ASGI lifespan shutdown failed: {stopped.get('message', '')}")
        if not task.done():
            task.cancel()
        await asyncio.wait({task})
        error = None if task.cancelled() else task.exception()  # always retrieve it
        if error is not None and started is not None:
            raise RuntimeError("ASGI lifespan task failed") from error
