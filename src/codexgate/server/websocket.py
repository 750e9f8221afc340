"""`/v1/responses` over a WebSocket (codex-contract.md §5): one `response.create` text frame per
request, the answer's events as text frames, and the connection's memory of its last response,
so that a client sends `previous_response_id` and only the new items, with `store:false` too.

One response is in flight per connection at a time; frames are read while it streams, so a
client that leaves cancels the upstream request, and a second `response.create` before the
first's terminal event is answered with an error frame instead of being queued behind it. One
sent after the terminal event is served at once: what the backend still reads of the upstream
then (its `[DONE]`) is read in a task of its own.

Limits: connections at once, a connection's lifetime, and how much a connection remembers
(past it, the next continuation is "not found" and the client sends the whole history, as
after a reconnect). A connection over its lifetime is told `websocket_connection_limit_reached`
(Codex reconnects) and closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from codexgate.backends.base import Inbound, conversation_of
from codexgate.errors import GatewayError, InvalidRequest
from codexgate.redact import Redactor
from codexgate.server.asgi import Receive, Scope, Send
from codexgate.server.exchange import Exchange
from codexgate.server.guard import API_KEY_NAME
from codexgate.server.keys.rate_limits import Headers
from codexgate.server.response import Responder
from codexgate.server.state import Recent, Remembered
from codexgate.translate.envelope import Envelope, estimated_usage
from codexgate.translate.turn import new_id
from codexgate.wire.checks import decode_json_object
from codexgate.wire.responses import ResponsesRequest
from codexgate.wire.responses_events import Event

log = logging.getLogger("codexgate.websocket")


LIMIT_REACHED = "websocket_connection_limit_reached"
IN_FLIGHT = "response_in_progress"
_GOING_AWAY = 1001
_TRY_AGAIN_LATER = 1013


@dataclass(frozen=True, slots=True)
class SocketLimits:
    max_connections: int = 256
    max_lifetime: float = 3600.0  # seconds
    max_memory: int = 64 * 1024 * 1024  # bytes a connection may remember of its last response


# The create frame and the API key's name -> (canonical request, what is known of it);
# raises InvalidRequest naming the field.
Reader = Callable[[dict[str, Any], str | None, int], tuple[ResponsesRequest, Inbound]]


class ResponsesSockets:
    """Every WebSocket connection on /v1/responses. Each response lives as one over HTTP does
    (server/response.py: admitted by its key's limits, routed, ended by a stopping server)."""

    def __init__(self, read: Reader, responder: Responder, limits: SocketLimits) -> None:
        self._read = read
        self.responder = responder
        self.limits = limits
        self.open = 0

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        await send({"type": "websocket.accept"})
        if self.open >= self.limits.max_connections:
            error = GatewayError(
                f"This gateway serves at most {self.limits.max_connections} WebSocket connections; "
                "reconnect later.",
                code=LIMIT_REACHED,
                status=503,
            )
            await send(_text(_error_frame(error)))
            await send({"type": "websocket.close", "code": _TRY_AGAIN_LATER})
            return
        self.open += 1
        try:
            await _Connection(self, scope, receive, send).run()
        finally:
            self.open -= 1


class _Connection:
    def __init__(self, sockets: ResponsesSockets, scope: Scope, receive: Receive, send: Send) -> None:
        self.sockets = sockets
        self.scope = scope
        self.receive = receive
        self.send = send
        self.recent = Recent()
        self.remembered_bytes = 0
        self.opened = time.monotonic()
        self.frames: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.busy = False  # a response is in flight and its terminal frame not yet sent
        self.answered = False  # the response in flight sent its terminal frame
        self.responding: asyncio.Task[None] | None = None  # the response in flight
        self.tails: set[asyncio.Task[None]] = set()  # answered responses' upstream tails, read
        self.left = False  # the client closed the connection
        self.conversation = conversation_of(scope.get(API_KEY_NAME), f"ws:{os.urandom(8).hex()}")

    async def run(self) -> None:
        reader = asyncio.ensure_future(self._read_frames())
        streams = self.sockets.responder.streams
        # A stopping server: the connection closes (1001) once no response is in flight, at
        # once when idle (None wakes the loop), so the client reconnects to a gateway that stays.
        streams.hold(self._going_away)
        try:
            while not streams.stopping and (message := await self.frames.get()) is not None:
                if time.monotonic() - self.opened > self.sockets.limits.max_lifetime:
                    await self._send_error(
                        GatewayError(
                            "This WebSocket connection reached its lifetime limit; reconnect.",
                            code=LIMIT_REACHED,
                            status=400,
                        )
                    )
                    await self.send({"type": "websocket.close", "code": _GOING_AWAY})
                    return
                await self._respond_watched(message)
            if streams.stopping:
                with contextlib.suppress(Exception):  # the client may be gone
                    await self.send({"type": "websocket.close", "code": _GOING_AWAY})
        finally:
            streams.release(self._going_away)
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            # The connection is over: the tails still read are cut (their upstream connections
            # closed rather than kept for another request).
            tails = list(self.tails)
            for tail in tails:
                tail.cancel()
            await asyncio.gather(*tails, return_exceptions=True)

    async def _respond_watched(self, message: dict[str, Any]) -> None:
        """Answer a frame in a task of its own, which the reader cancels when the client
        leaves mid-answer: closing the backend's events then cancels the upstream request."""
        task = asyncio.ensure_future(self._respond(message))
        self.responding = task
        try:
            await task
        except asyncio.CancelledError:
            if not self.left:
                raise  # cancelled from outside (the server stopping): not the client
            log.info("client disconnected; upstream request cancelled")
        finally:
            self.responding = None

    def _going_away(self) -> None:
        self.frames.put_nowait(None)

    async def _read_frames(self) -> None:
        """Frames into the queue; a frame that arrives while a response streams is refused at
        once. None at the end of the connection."""
        try:
            while True:
                message = await self.receive()
                if message["type"] == "websocket.disconnect":
                    self.left = True
                    if self.responding is not None:
                        self.responding.cancel()
                    return
                if message["type"] != "websocket.receive":
                    return  # nothing else may follow the connect message
                if self.busy:
                    await self._send_error(
                        InvalidRequest(
                            "A response is already in progress on this connection; send the next "
                            "response.create after its terminal event.",
                            code=IN_FLIGHT,
                            status=409,
                        )
                    )
                    continue
                self.busy = True
                await self.frames.put(message)
        finally:
            self.frames.put_nowait(None)

    async def _respond(self, message: dict[str, Any]) -> None:
        # Taken out of the message, as the request is below once the backend has it: a long
        # answer holds only what the rest of it needs.
        text = message.pop("text", None)
        raw = text.encode() if isinstance(text, str) else (message.pop("bytes", None) or b"")
        del text
        frame_bytes = len(raw)
        self.answered = False
        responder = self.sockets.responder
        exchange = Exchange(None, "responses-ws")
        exchange.caller = self.scope.get(API_KEY_NAME)
        output = _Frames(self, exchange, frame_bytes)
        previous: str | None = None
        try:
            data = _create_frame(raw)
            del raw
            generate = data.pop("generate", True)
            req, inbound = self.sockets._read(data, exchange.caller, frame_bytes)
            if inbound.conversation is None:  # the connection is the conversation (routing/choice.py)
                inbound = dataclasses.replace(inbound, conversation=self.conversation)
            del data
            exchange.model, exchange.req = req.model, req
            previous = req.previous_response_id
            if generate is False:
                await self._prewarm(req, inbound, frame_bytes)
                exchange.status, exchange.outcome = 200, "prewarmed"
                return
            answer = responder.respond(exchange, req, inbound, output, self.recent)
            del req, inbound
            await answer
        except GatewayError as exc:  # before the first frame of the answer (server/response.py)
            exchange.status, exchange.outcome = exc.status, exc.code
            exchange.error_message = exc.message
            if previous is not None:  # a failed continuation evicts what it continued
                self.recent.forget(previous)
            await self._answered(exchange)
            await self._send_error(exc, output.headers)
        finally:
            if not self.answered:  # no terminal frame went out (the client left, the server stops)
                self.busy = False
            await exchange.settle()
            exchange.log()
            responder.observers.finished(exchange)

    async def _answered(self, exchange: Exchange | None) -> None:
        """The response's last frame is about to go out: the client may send its next
        `response.create` as soon as it reads it (Codex does), so from now on that frame is
        queued, not refused (and taken as soon as this response's handler returns, its upstream
        tail read apart: `_read_tail`); and the key's slot is freed now (Exchange.settle)."""
        if exchange is not None:
            await exchange.settle()
        self.busy = False
        self.answered = True

    def _account(self, added: int) -> None:
        """Keep the connection's memory within its limit: past it, forget the last response
        (the next continuation is "not found"; the client then sends the whole history)."""
        if self.recent.last is None:
            self.remembered_bytes = 0
            return
        self.remembered_bytes += added
        if self.remembered_bytes > self.sockets.limits.max_memory:
            self.recent.last = None
            self.remembered_bytes = 0

    async def _prewarm(self, req: ResponsesRequest, inbound: Inbound, frame_bytes: int) -> None:
        """`generate:false` (an extension the newest spec dropped; Codex sends it): nothing is
        generated; the request's context is remembered so that the next request continues it
        with only new items. Codex waits for the completed event."""
        prepared = await self.sockets.responder.state.prepare(req, inbound, self.recent)
        now = int(time.time())
        envelope = Envelope.for_request(req, new_id("resp"), now)
        created = envelope.resource("in_progress", [])
        done = envelope.resource("completed", [], usage=estimated_usage(0, 0), completed_at=now)
        self.recent.last = Remembered(envelope.response_id, prepared.req.input, [])
        self._account(frame_bytes)
        await self.send(_text({"type": "response.created", "sequence_number": 0, "response": created}))
        await self._answered(None)
        await self.send(_text({"type": "response.completed", "sequence_number": 1, "response": done}))

    async def _send_error(self, error: GatewayError, headers: Headers | None = None) -> None:
        with contextlib.suppress(Exception):  # the client may be gone
            await self.send(_text(_error_frame(error, self.sockets.responder.redactor, headers)))


class _Frames:
    """A response's events as text frames (server/response.py `Output`): the connection may take
    its next `response.create` from the terminal frame on, and what the backend still reads of
    the upstream then is read in a task of its own."""

    __slots__ = ("_connection", "_exchange", "_frame_bytes", "_output_bytes", "headers")

    def __init__(self, connection: _Connection, exchange: Exchange, frame_bytes: int) -> None:
        self._connection = connection
        self._exchange = exchange
        self._frame_bytes = frame_bytes
        self._output_bytes = 0
        self.headers: Headers = []  # a limited key's, for an error frame

    def add_headers(self, headers: Headers) -> None:
        self.headers = [*self.headers, *headers]

    async def send(self, batch: list[Event], ending: bool) -> None:
        connection = self._connection
        self._exchange.status = 200
        if ending:
            await connection._answered(None)  # the relay settled the exchange
        send = connection.send
        for event in batch:
            frame = orjson.dumps(event).decode()
            if event["type"] == "response.output_item.done":
                self._output_bytes += len(frame)
            await send({"type": "websocket.send", "text": frame})
        if ending:
            connection._account(self._frame_bytes + self._output_bytes)

    async def finish(self, events: AsyncGenerator[list[Event], None], ended: bool) -> bool:
        if not ended:
            return False
        # The client may send its next request now: it does not wait for this.
        tails = self._connection.tails
        tail = asyncio.ensure_future(_read_tail(events))
        tails.add(tail)
        tail.add_done_callback(tails.discard)
        return True

    def stop(self) -> None:
        return None


async def _read_tail(events: AsyncGenerator[list[Event], None]) -> None:
    """What the backend reads after the terminal event: the upstream's `[DONE]`, so that its
    connection serves another request (bounded: backends/http/stream.py drain)."""
    try:
        try:
            async for _ in events:
                pass
        finally:
            await events.aclose()
    except Exception:  # nothing is owed to the client any more: its answer ended
        log.debug("reading an answered upstream's tail failed", exc_info=True)


def _create_frame(raw: bytes) -> dict[str, Any]:
    data = decode_json_object(raw, "The frame")
    kind = data.pop("type", None)
    if kind != "response.create":
        raise InvalidRequest(
            f'Unknown frame type {str(kind)[:60]!r}: send {{"type": "response.create", ...}}.', param="type"
        )
    data.pop("stream", None)  # a WebSocket answer is always a stream of events
    data["stream"] = True
    return data


def _error_frame(
    error: GatewayError, redactor: Redactor | None = None, headers: Headers | None = None
) -> dict[str, Any]:
    """`{"type":"error","status":...,"error":{...},"headers":{...}}`: what Codex maps like an
    HTTP error, with its Retry-After and a limited key's rate-limit headers."""
    body = error.to_body()["error"]
    if redactor is not None and isinstance(body.get("message"), str):
        body["message"] = redactor.redact(body["message"])
    frame: dict[str, Any] = {"type": "error", "status": error.status, "error": body}
    said = {name.decode(): value.decode() for name, value in headers or ()}
    if error.retry_after is not None:
        said["retry-after"] = str(max(1, math.ceil(error.retry_after)))
    if said:
        frame["headers"] = said
    return frame


def _text(frame: dict[str, Any]) -> dict[str, Any]:
    return {"type": "websocket.send", "text": orjson.dumps(frame).decode()}
