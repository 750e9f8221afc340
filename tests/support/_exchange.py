"""Drive one HTTP request through an ASGI app in-process and stream its response out.

Both in-process transports (`asgi_upstream` for the gateway's upstream side, `asgi_client` for
httpx on the client side) are thin adapters over `ASGIExchange`, so they share one set of
semantics, chosen to match uvicorn (the server codexgate runs under) rather than to be lenient:

* the app runs in its own task; `start()` returns as soon as it sent `http.response.start`;
* body chunks pass through a small bounded channel, so a slow reader back-pressures the app the
  way a full socket buffer would, and a fast reader sees every chunk as soon as it is sent;
* `receive()` after the request body blocks until the client goes away or the response is
  complete, then answers `http.disconnect` (uvicorn does the same);
* after a disconnect, `send()` is silently ignored, as uvicorn does, so an app that does not
  watch `receive()` for the disconnect keeps running and tests can catch that; with
  `ExchangeOptions(raise_on_send_after_disconnect=True)` it raises an `OSError` instead;
* an app that returns (or raises) after starting the response but without `more_body=False`
  looks like a connection cut mid-body (`BodyIncomplete`);
* `aclose()` before the end marks the client gone, gives the app `disconnect_grace` seconds
  to notice and return, then cancels it; either way no task is left behind.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes

from codexgate.server.asgi import App, Message, Receive, Scope

ASGIApp = App


@dataclass(frozen=True)
class ExchangeOptions:
    """Where an exchange may behave one way or another: `buffer_chunks` body chunks are held
    before the app's `send()` waits for the reader; an app gets `disconnect_grace` seconds to
    return after the client left before it is cancelled; `raise_on_send_after_disconnect` makes
    a `send()` after the client left raise `ClientDisconnected` instead of being ignored."""

    buffer_chunks: int = 8
    disconnect_grace: float = 1.0
    raise_on_send_after_disconnect: bool = False


DEFAULT_OPTIONS = ExchangeOptions()


async def read_body(receive: Receive) -> bytes | None:
    """An ASGI app's whole request body, or None if the client went away first."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


class ClientDisconnected(OSError):
    """Raised by `send()` after the client went away, when the exchange is asked to."""


class AppFailedBeforeStart(Exception):
    """The app raised, or returned, before sending `http.response.start`."""

    def __init__(self, app_error: BaseException | None) -> None:
        what = f"raised {app_error!r}" if app_error else "returned"
        super().__init__(f"ASGI app {what} before starting the response")
        self.app_error = app_error


class BodyIncomplete(Exception):
    """The response body ended without `more_body=False`: the app returned or raised mid-body,
    or the client already closed the response."""

    def __init__(self, message: str, app_error: BaseException | None = None) -> None:
        super().__init__(message)
        self.app_error = app_error


class _Cut:
    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


_END = object()
_CLOSED = object()


class _BodyChannel:
    """A bounded FIFO of body chunks between the app task and the reader.

    Like an `asyncio.Queue(maxsize)` (the bound is what back-pressures the app), plus what
    Python 3.11's Queue lacks: `close()` wakes a reader blocked on `get()` (it gets `_CLOSED`)
    and a writer blocked on `put()` (its chunk is dropped), so closing from another task
    never leaves either side hanging. End markers bypass the bound.
    """

    def __init__(self, capacity: int) -> None:
        self._items: deque[object] = deque()
        self._capacity = max(1, capacity)
        self._not_empty = asyncio.Event()
        self._not_full = asyncio.Event()
        self._closed = False

    async def put(self, item: bytes) -> None:
        while len(self._items) >= self._capacity and not self._closed:
            self._not_full.clear()
            await self._not_full.wait()
        if not self._closed:
            self._items.append(item)
            self._not_empty.set()

    def put_end(self, marker: object) -> None:
        if not self._closed:
            self._items.append(marker)
            self._not_empty.set()

    async def get(self) -> object:
        while not self._items:
            if self._closed:
                return _CLOSED
            self._not_empty.clear()
            await self._not_empty.wait()
        item = self._items.popleft()
        self._not_full.set()
        return item

    def close(self) -> None:
        self._closed = True
        self._items.clear()
        self._not_empty.set()
        self._not_full.set()


def build_http_scope(
    *,
    method: str,
    scheme: str,
    host: str,
    port: int | None,
    raw_path: bytes,
    query_string: bytes,
    headers: list[tuple[bytes, bytes]],
    client: tuple[str, int] = ("127.0.0.1", 50000),
    root_path: str = "",
    state: dict[str, Any] | None = None,
) -> Scope:
    """An ASGI 3 `http` scope as uvicorn builds it; header names are lower-cased here."""
    if port is None:
        port = 443 if scheme in ("https", "wss") else 80
    raw_path = raw_path or b"/"
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method.upper(),
        "scheme": scheme,
        "path": unquote_to_bytes(raw_path).decode("utf-8", "surrogateescape"),
        "raw_path": raw_path,
        "query_string": query_string,
        "root_path": root_path,
        "headers": [(name.lower(), value) for name, value in headers],
        "client": client,
        "server": (host, port),
    }
    if state is not None:
        scope["state"] = dict(state)  # uvicorn hands each request a shallow copy
    return scope


class ASGIExchange:
    """One request/response cycle against an ASGI app, run in the current event loop."""

    def __init__(
        self,
        app: ASGIApp,
        scope: Scope,
        body: bytes | AsyncIterable[bytes],
        options: ExchangeOptions = DEFAULT_OPTIONS,
    ) -> None:
        self._app = app
        self._scope = scope
        self._body = body
        self._body_iter: AsyncIterator[bytes] | None = None
        self._request_complete = False
        self._grace = options.disconnect_grace
        self._raise_after_disconnect = options.raise_on_send_after_disconnect
        self._channel = _BodyChannel(options.buffer_chunks)
        # Set once receive() must answer http.disconnect: client gone or response complete.
        self._done_event = asyncio.Event()
        self._start_future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.response_started = False
        self.response_complete = False
        self.disconnected = False
        self.app_error: BaseException | None = None
        self.forced_cancel = False

    # -- consumer side -------------------------------------------------------------------------

    async def start(self) -> None:
        """Run the app until it starts the response. Raises AppFailedBeforeStart."""
        self._task = asyncio.create_task(self._run_app(), name="asgi-exchange")
        try:
            await asyncio.wait({self._start_future, self._task}, return_when="FIRST_COMPLETED")
        except BaseException:
            await self.aclose()
            raise
        if not self._start_future.done():
            error = self.app_error
            await self.aclose()
            raise AppFailedBeforeStart(error)

    async def body(self) -> AsyncIterator[bytes]:
        """Body chunks as the app sends them. Raises BodyIncomplete on a cut."""
        while True:
            item = await self._channel.get()
            if item is _END:
                return
            if item is _CLOSED:
                raise BodyIncomplete("response closed")
            if isinstance(item, _Cut):
                raise BodyIncomplete("ASGI app stopped without finishing the response body", item.error)
            assert isinstance(item, bytes)
            yield item

    @property
    def running(self) -> bool:
        """The app task is still running."""
        return self._task is not None and not self._task.done()

    @property
    def closed(self) -> bool:
        """`aclose()` was called."""
        return self._closed

    async def aclose(self) -> None:
        """Release the exchange; before the end this is a client disconnect. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._channel.close()  # wakes a reader in another task and an app blocked on send
        task = self._task
        if task is not None and not task.done():
            if not self.response_complete:
                self.disconnected = True
                self._done_event.set()
            try:
                done, _ = await asyncio.wait({task}, timeout=self._grace)
                if not done:
                    self.forced_cancel = True
                    task.cancel()
                    done, _ = await asyncio.wait({task}, timeout=self._grace)
            except asyncio.CancelledError:
                task.cancel()
                raise
            if not done:
                raise RuntimeError("ASGI app ignored cancellation after the client disconnected")

    # -- app side ------------------------------------------------------------------------------

    async def _run_app(self) -> None:
        try:
            await self._app(self._scope, self._receive, self._send)
        except Exception as exc:
            self.app_error = exc
        if self.response_started and not self.response_complete:
            self._done_event.set()
            self._channel.put_end(_Cut(self.app_error))

    async def _receive(self) -> Message:
        if not self._request_complete:
            return await self._next_request_message()
        await self._done_event.wait()
        return {"type": "http.disconnect"}

    async def _next_request_message(self) -> Message:
        if isinstance(self._body, bytes | bytearray | memoryview):
            self._request_complete = True
            return {"type": "http.request", "body": bytes(self._body), "more_body": False}
        if self._body_iter is None:
            self._body_iter = aiter(self._body)
        try:
            chunk = await anext(self._body_iter)
        except StopAsyncIteration:
            self._request_complete = True
            return {"type": "http.request", "body": b"", "more_body": False}
        return {"type": "http.request", "body": bytes(chunk), "more_body": True}

    async def _send(self, message: Message) -> None:
        if self.disconnected:
            if self._raise_after_disconnect:
                raise ClientDisconnected("client disconnected")
            return
        kind = message["type"]
        if kind == "http.response.start":
            if self.response_started:
                raise RuntimeError("ASGI app sent 'http.response.start' twice")
            self.status = int(message["status"])
            self.headers = [(bytes(name).lower(), bytes(value)) for name, value in message.get("headers", ())]
            self.response_started = True
            self._start_future.set_result(None)
        elif kind == "http.response.body":
            if not self.response_started:
                raise RuntimeError("ASGI app sent a body before 'http.response.start'")
            if self.response_complete:
                raise RuntimeError("ASGI app sent a body after the response was complete")
            chunk = bytes(message.get("body", b""))
            more_body = bool(message.get("more_body", False))
            if not more_body:
                self.response_complete = True
            if chunk:
                await self._channel.put(chunk)
            if not more_body:
                self._done_event.set()
                self._channel.put_end(_END)
        else:
            raise RuntimeError(f"unsupported ASGI message {kind!r}")
