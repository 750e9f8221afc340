"""Delivery over HTTP: a backend's event batches to the client, through the encoder its face
chose (an event stream of Responses events, chat chunks or Messages events; one JSON body), as
the `Output` of the response's life (server/response.py), while watching for the client leaving
(which cancels the upstream request). Delivery knows no face: a face is a module under
server/faces/ that reads a request and hands over an encoder.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from codexgate.backends.base import Inbound
from codexgate.errors import GatewayError
from codexgate.server.asgi import Receive, Send
from codexgate.server.exchange import Exchange
from codexgate.server.http_errors import ErrorShape, send_json
from codexgate.wire.responses import ResponsesRequest
from codexgate.wire.responses_events import Event

log = logging.getLogger("codexgate.server")


# The request's headers as ASGI gives them (lower-case names).
RequestHeaders = Sequence[tuple[bytes, bytes]]

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # proxies must not buffer the stream
]


class ClientGone(Exception):
    """The client disconnected before the answer was complete."""


class StreamEncoder:
    """How a face writes a streamed answer: the response head, each batch of events, and what
    follows the terminal batch; `keepalive`: bytes sent while the upstream is silent for
    `keepalive_seconds` (None: nothing)."""

    headers: list[tuple[bytes, bytes]] = SSE_HEADERS
    keepalive: bytes | None = None
    keepalive_seconds: float = 10.0

    def batch(self, events: list[Event]) -> bytes:
        raise NotImplementedError

    def end(self, terminal: Event) -> bytes:
        """Bytes after the batch holding the terminal event (e.g. `data: [DONE]`)."""
        return b""


class BodyEncoder:
    """How a face writes a non-streamed answer, from the terminal event."""

    def whole(self, terminal: Event) -> tuple[int, Any]:
        """(HTTP status, JSON body)."""
        raise NotImplementedError


@dataclass(slots=True)
class Ask:
    """A request as a face read it: the canonical request, what is known of it, and how the
    answer is to be written."""

    req: ResponsesRequest
    inbound: Inbound
    encoder: StreamEncoder | BodyEncoder


class Face(Protocol):
    """What a client speaks, as the server sees it (a module under server/faces/)."""

    @property
    def name(self) -> str:
        """For the access log: `responses`, `chat`."""
        ...

    @property
    def error_shape(self) -> ErrorShape:
        """How this face's clients read an error answered before the first byte."""
        ...

    def read(self, body: bytes, caller: str | None, headers: RequestHeaders) -> Ask:
        """The request as the canonical request and the encoder of its answer; `headers` are
        the request's. Raises InvalidRequest (a 400 naming the field) for a body this face
        cannot read."""
        ...


class StreamOutput:
    """An answer streamed over HTTP through its face's encoder (server/response.py `Output`).

    The head goes out with the first batch, not before it: the backend's run has then started,
    so whatever happens to the client next, closing the run releases the backend. An encoder
    with a `keepalive` (the Messages face's `ping`) has it sent whenever nothing else went out
    for `keepalive_seconds`, until the terminal event (`stop` ends it; the transport calls it)."""

    __slots__ = ("_encoder", "_send", "_exchange", "_headers", "_started", "_last_sent", "_timer", "_pinging")

    def __init__(self, encoder: StreamEncoder, send: Send, exchange: Exchange) -> None:
        self._encoder = encoder
        self._send = send
        self._exchange = exchange
        self._headers = encoder.headers
        self._started = False
        self._last_sent = 0.0
        # While keepalives may be due: a timer (no task per stream), and the send of one.
        self._timer: asyncio.TimerHandle | None = None
        self._pinging: asyncio.Task[None] | None = None

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        """The headers the answer carries beyond the encoder's (for an error answered instead)."""
        return self._headers[len(self._encoder.headers) :]

    def add_headers(self, headers: list[tuple[bytes, bytes]]) -> None:
        self._headers = [*self._headers, *headers]

    async def send(self, batch: list[Event], ending: bool) -> None:
        send = self._send
        if not self._started:
            await send({"type": "http.response.start", "status": 200, "headers": self._headers})
            self._started = True
            self._exchange.status = 200
            if self._encoder.keepalive is not None and not ending:
                loop = asyncio.get_running_loop()
                self._last_sent = loop.time()
                self._timer = loop.call_later(self._encoder.keepalive_seconds, self._keepalive_due)
        data = self._encoder.batch(batch)
        if data:  # a face may have nothing to say for some events (chat: in_progress)
            await send({"type": "http.response.body", "body": data, "more_body": True})
            if self._timer is not None:
                self._last_sent = asyncio.get_running_loop().time()
        if ending:
            # The HTTP response ends at the terminal event; the backend may still drain the upstream.
            self.stop()
            self._exchange.complete = True
            await send({"type": "http.response.body", "body": self._encoder.end(batch[-1])})

    async def finish(self, events: AsyncGenerator[list[Event], None], ended: bool) -> bool:
        if ended:
            async for _ in events:  # the backend drains the upstream after the terminal event
                pass
            return False
        self.stop()
        if not self._started:  # nothing was sent yet: still an HTTP error (the turn's run never does this)
            raise GatewayError("The stream ended without a terminal event.")
        self._exchange.complete = True
        await self._send({"type": "http.response.body", "body": b""})
        return False

    def stop(self) -> None:
        """No more keepalives (the answer ended, or the transport gave up on it)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pinging is not None:
            self._pinging.cancel()
            self._pinging = None

    def _keepalive_due(self) -> None:
        """The timer ran out: a keepalive goes out if nothing else did meanwhile, and the timer
        is set again for when the next one would be due."""
        loop = asyncio.get_running_loop()
        every = self._encoder.keepalive_seconds
        silent = loop.time() - self._last_sent
        if silent >= every and (self._pinging is None or self._pinging.done()):
            self._pinging = asyncio.ensure_future(self._send_keepalive())
            silent = 0.0
        self._timer = loop.call_later(every - silent, self._keepalive_due)

    async def _send_keepalive(self) -> None:
        keepalive = self._encoder.keepalive
        assert keepalive is not None
        self._last_sent = asyncio.get_running_loop().time()
        try:
            await self._send({"type": "http.response.body", "body": keepalive, "more_body": True})
        except Exception:  # the client left: the answer's own send says so
            log.debug("a keepalive was not sent", exc_info=True)


class BodyOutput:
    """A non-streamed answer over HTTP: the same events, folded into one body by the face's
    encoder once the terminal event comes."""

    __slots__ = ("_encoder", "_send", "_exchange", "headers")

    def __init__(self, encoder: BodyEncoder, send: Send, exchange: Exchange) -> None:
        self._encoder = encoder
        self._send = send
        self._exchange = exchange
        self.headers: list[tuple[bytes, bytes]] = []

    def add_headers(self, headers: list[tuple[bytes, bytes]]) -> None:
        self.headers = [*self.headers, *headers]

    async def send(self, batch: list[Event], ending: bool) -> None:
        if not ending:
            return
        self._exchange.complete = True
        status, body = self._encoder.whole(batch[-1])
        self._exchange.status = status
        await send_json(self._send, status, body, self.headers)

    async def finish(self, events: AsyncGenerator[list[Event], None], ended: bool) -> bool:
        if not ended:
            raise GatewayError("The stream ended without a terminal event.")
        async for _ in events:  # the backend drains the upstream after the terminal event
            pass
        return False

    def stop(self) -> None:
        return None


def http_output(
    encoder: StreamEncoder | BodyEncoder, send: Send, exchange: Exchange
) -> StreamOutput | BodyOutput:
    """The output of an HTTP answer written by `encoder`."""
    if isinstance(encoder, StreamEncoder):
        return StreamOutput(encoder, send, exchange)
    return BodyOutput(encoder, send, exchange)


async def until_disconnect(receive: Receive, delivery: Exchange, work: Awaitable[None]) -> None:
    """Run the answer while listening for the client leaving; if it leaves before the response
    is complete, cancel the work, which closes the upstream request. Raises ClientGone then.

    The work runs in this task and one watcher task listens: a second task for the work, and
    asyncio.wait over both, cost ~30 us per request for nothing. The watcher is made once
    this task first waits (at the latest, for the upstream's answer), not before: it could
    not hear anything sooner, and the upstream request goes out ~9 us earlier."""
    task = asyncio.current_task()
    assert task is not None
    left = False
    watcher: asyncio.Future[None] | None = None

    async def watch() -> None:
        nonlocal left
        while (await receive())["type"] != "http.disconnect":
            pass
        if not delivery.complete:
            left = True
            task.cancel()

    def start_watching() -> None:
        nonlocal watcher
        watcher = asyncio.ensure_future(watch())

    starting = asyncio.get_running_loop().call_soon(start_watching)
    try:
        await work
    except asyncio.CancelledError:
        if not left:
            raise  # cancelled from outside (shutdown): not the client
        task.uncancel()
        log.info("client disconnected; upstream request cancelled")
        raise ClientGone() from None
    finally:
        starting.cancel()
        if watcher is not None:
            watcher.cancel()
