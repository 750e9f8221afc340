"""Delivery: a backend's event batches to the client as an SSE stream or one JSON body, while
watching for the client leaving (which cancels the upstream request)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from codexgate.errors import GatewayError
from codexgate.redact import Redactor
from codexgate.server.access import Exchange
from codexgate.server.faces.responses import encode_batch, final_body
from codexgate.server.http_errors import Send, failed_response, redact_failure, send_json
from codexgate.wire.responses_events import FAILED, TERMINAL, Event

log = logging.getLogger("codexgate.server")

Receive = Callable[[], Awaitable[dict[str, Any]]]

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # proxies must not buffer the stream
]


class ClientGone(Exception):
    """The client disconnected before the answer was complete."""


async def deliver_sse(
    events: AsyncIterator[list[Event]], send: Send, delivery: Exchange, redactor: Redactor
) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
    delivery.status = 200
    batches = 0
    async for batch in events:
        last = batch[-1]["type"]
        if last == FAILED:
            redact_failure(batch[-1], redactor)
        await send({"type": "http.response.body", "body": encode_batch(batch), "more_body": True})
        batches += 1
        if batches == 2:  # the first batch after response.created/in_progress
            delivery.saw_output()
        if last in TERMINAL:
            delivery.ended_with(batch[-1])
            break
    # End the HTTP response at the terminal event; the backend may still drain the upstream.
    delivery.complete = True
    await send({"type": "http.response.body", "body": b""})


async def deliver_json(
    events: AsyncIterator[list[Event]], send: Send, delivery: Exchange, redactor: Redactor
) -> None:
    """Non-streaming: the same events, folded into the final response object."""
    final: Event | None = None
    batches = 0
    async for batch in events:
        batches += 1
        if batches == 2:
            delivery.saw_output()
        last = batch[-1]
        if last["type"] in TERMINAL:
            final = last
            break
    if final is None:
        raise GatewayError("The stream ended without a terminal event.")
    delivery.complete = True
    if final["type"] == FAILED:
        redact_failure(final, redactor)
        delivery.ended_with(final)
        status, body = failed_response(final)
    else:
        delivery.ended_with(final)
        status, body = 200, final_body(final)
    delivery.status = status
    await send_json(send, status, body)


async def until_disconnect(receive: Receive, delivery: Exchange, work: Awaitable[None]) -> None:
    """Run the answer while listening for the client leaving; if it leaves before the response
    is complete, cancel the work, which closes the upstream request. Raises ClientGone then.

    The work runs in this task and one watcher task listens: a second task for the work, and
    asyncio.wait over both, cost ~30 us per request for nothing."""
    task = asyncio.current_task()
    assert task is not None
    left = False

    async def watch() -> None:
        nonlocal left
        while (await receive())["type"] != "http.disconnect":
            pass
        if not delivery.complete:
            left = True
            task.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        await work
    except asyncio.CancelledError:
        if not left:
            raise  # cancelled from outside (shutdown): not the client
        task.uncancel()
        log.info("client disconnected; upstream request cancelled")
        raise ClientGone() from None
    finally:
        watcher.cancel()
