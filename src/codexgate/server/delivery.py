"""Delivery: a backend's event batches to the client, through the encoder its face chose (an
event stream of Responses events or chat chunks, one JSON body), while watching for the client
leaving (which cancels the upstream request). Delivery knows no face: a face is a module under
server/faces/ that reads a request and hands over an encoder.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

from codexgate.backends.base import Inbound
from codexgate.errors import GatewayError
from codexgate.redact import Redactor
from codexgate.server.asgi import Receive, Send
from codexgate.server.exchange import Exchange
from codexgate.server.http_errors import redact_failure, send_json
from codexgate.wire.responses import ResponsesRequest
from codexgate.wire.responses_events import FAILED, TERMINAL, Event

log = logging.getLogger("codexgate.server")


SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # proxies must not buffer the stream
]


class ClientGone(Exception):
    """The client disconnected before the answer was complete."""


class StreamEncoder:
    """How a face writes a streamed answer: the response head, each batch of events, and what
    follows the terminal batch."""

    headers: list[tuple[bytes, bytes]] = SSE_HEADERS

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

    def read(self, body: bytes, caller: str | None) -> Ask:
        """The request as the canonical request and the encoder of its answer. Raises
        InvalidRequest (a 400 naming the field) for a body this face cannot read."""
        ...


async def deliver_stream(
    events: AsyncIterator[list[Event]],
    encoder: StreamEncoder,
    send: Send,
    delivery: Exchange,
    redactor: Redactor,
) -> None:
    # The head goes out with the first batch, not before it: the backend's run has then
    # started, so whatever happens to the client next, closing the run releases the backend.
    batches = 0
    terminal: Event | None = None
    watch = delivery.watch
    async for batch in events:
        if not batches:
            await send({"type": "http.response.start", "status": 200, "headers": encoder.headers})
            delivery.status = 200
        last = batch[-1]
        if last["type"] == FAILED:
            redact_failure(last, redactor)
        if watch is not None:
            watch(batch)
        if last["type"] in TERMINAL:
            terminal = last
            delivery.ended_with(last)
            await delivery.settle()
        data = encoder.batch(batch)
        if data:  # a face may have nothing to say for some events (chat: in_progress)
            await send({"type": "http.response.body", "body": data, "more_body": True})
        batches += 1
        if batches == 2:  # the first batch after response.created/in_progress
            delivery.saw_output()
        if terminal is not None:
            break
        # Nothing of a sent batch waits with the stream for the next one: the first batch (the
        # response twice, with the request's echo) would otherwise be held through the model's
        # whole prefill, encoded and decoded (~50 KB for a Codex request).
        del batch, last, data
    if not batches:  # nothing was sent yet: still an HTTP error (the turn's run never does this)
        raise GatewayError("The stream ended without a terminal event.")
    # End the HTTP response at the terminal event; the backend may still drain the upstream.
    delivery.complete = True
    await send({"type": "http.response.body", "body": encoder.end(terminal) if terminal else b""})


async def deliver_body(
    events: AsyncIterator[list[Event]],
    encoder: BodyEncoder,
    send: Send,
    delivery: Exchange,
    redactor: Redactor,
) -> None:
    """Non-streaming: the same events, folded into one body by the face's encoder."""
    final: Event | None = None
    batches = 0
    watch = delivery.watch
    async for batch in events:
        batches += 1
        if batches == 2:
            delivery.saw_output()
        last = batch[-1]
        if last["type"] == FAILED:
            redact_failure(last, redactor)
        if watch is not None:
            watch(batch)
        if last["type"] in TERMINAL:
            final = last
            break
    if final is None:
        raise GatewayError("The stream ended without a terminal event.")
    delivery.complete = True
    delivery.ended_with(final)
    await delivery.settle()
    status, body = encoder.whole(final)
    delivery.status = status
    await send_json(send, status, body)


async def deliver(
    events: AsyncIterator[list[Event]],
    encoder: StreamEncoder | BodyEncoder,
    send: Send,
    delivery: Exchange,
    redactor: Redactor,
) -> None:
    if isinstance(encoder, StreamEncoder):
        await deliver_stream(events, encoder, send, delivery, redactor)
    else:
        await deliver_body(events, encoder, send, delivery, redactor)


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
