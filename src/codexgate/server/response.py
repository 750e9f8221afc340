"""One response's life, whatever carries it: HTTP (an event stream or a JSON body) and WebSocket
frames share it, for every face; each transport provides only its `Output`.

The life, in order: the caller's key is admitted by its limits (server/keys/admission.py: a
refusal is the answer); the response's scope is entered (its interrupt, by which a stopping
server ends it: server/stopping.py); the model is routed to a backend (routing/router.py; a
pool picks its member and fails over before the first byte) and the request services prepare
it (server/state.py: stored history, compaction); the observers see it start; `open()` sends
the upstream request (an error up to here is raised, for the transport to answer in its own
shape); then `relay` hands each batch of events to the output, watching them, and just before
the terminal event goes out frees the key's slot and counts what the answer spent
(`Exchange.settle`), since a client such as Codex sends its next request as soon as it reads it.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Protocol

from codexgate.backends import scope as request_scope
from codexgate.backends.base import Backend, Call, Inbound
from codexgate.backends.scope import entered as entered_scope
from codexgate.redact import Redactor
from codexgate.routing.router import Router
from codexgate.server.exchange import Exchange, answered_headers
from codexgate.server.http_errors import redact_failure
from codexgate.server.keys.admission import Admission
from codexgate.server.keys.rate_limits import Headers
from codexgate.server.observe import Observers
from codexgate.server.state import Recent, ResponseState
from codexgate.server.stopping import Streams
from codexgate.wire.responses import ResponsesRequest
from codexgate.wire.responses_events import FAILED, TERMINAL, Event

__all__ = ["Output", "Responder", "relay"]

Events = AsyncGenerator[list[Event], None]


class Output(Protocol):
    """What a transport does with one answer."""

    def add_headers(self, headers: Headers) -> None:
        """Headers the answer carries (a limited key's rate limits, which pool member answered);
        called before the first `send`. A transport without headers keeps them for its errors."""
        ...

    async def send(self, batch: list[Event], ending: bool) -> None:
        """Write one batch; `ending`: it holds the terminal event, the last batch sent."""
        ...

    async def finish(self, events: Events, ended: bool) -> bool:
        """After the last batch, when the relay ended by itself (`ended`: a terminal event went
        out): what the backend still reads of its upstream (its `[DONE]`) is read here, or in
        a task of the output's own (then True: the output closes `events`, not the caller).
        Raises GatewayError when the events ended before anything could be sent."""
        ...

    def stop(self) -> None:
        """The answer is over, however it ended: the output's own writes (keepalives) stop."""
        ...


async def relay(events: Events, output: Output, exchange: Exchange, redactor: Redactor) -> bool:
    """The answer's batches to `output`, with what every transport owes each of them: secrets
    masked in a failure, the observers' look, the terminal event recorded and the exchange
    settled before it goes out, the first output timed. Whether a terminal event went out."""
    batches = 0
    watch = exchange.watch
    async for batch in events:
        last = batch[-1]
        kind = last["type"]
        ending = kind in TERMINAL
        if kind == FAILED:
            redact_failure(last, redactor)
        if watch is not None:
            watch(batch)
        if ending:
            exchange.ended_with(last)
            await exchange.settle()
        await output.send(batch, ending)
        batches += 1
        if batches == 2:  # the first batch after response.created/in_progress
            exchange.saw_output()
        if ending:
            return True
        # Nothing of a sent batch waits with the stream for the next one: the first batch (the
        # response twice, with the request's echo) would otherwise be held through the model's
        # whole prefill (~50 KB for a Codex request).
        del batch, last
    return False


class Responder:
    """The app's services for one response: admission, routing, the request services, the
    observers, the streams a stopping server ends."""

    def __init__(
        self,
        router: Router[Backend],
        state: ResponseState,
        observers: Observers,
        admission: Admission,
        streams: Streams,
        redactor: Redactor,
        on_no_upstream: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.router = router
        self.state = state
        self.observers = observers
        self.admission = admission
        self.streams = streams
        self.redactor = redactor
        self._on_no_upstream = on_no_upstream

    async def respond(
        self,
        exchange: Exchange,
        req: ResponsesRequest,
        inbound: Inbound,
        output: Output,
        recent: Recent | None = None,
    ) -> None:
        """Serve `req` to `output`. Raises GatewayError before the first batch (a refusal, no
        route, an upstream that failed before answering), for the transport to answer."""
        ticket = await self.admission.admit(exchange.caller, req.model)
        exchange.at_end = functools.partial(self.admission.settle, ticket, exchange)
        if ticket.headers:
            output.add_headers(ticket.headers)
        if ticket.refusal is not None:
            raise ticket.refusal
        with self.streams.stream() as interrupt, entered_scope(interrupt):
            call = await self.call(req, inbound, exchange, recent)
            # The request (its whole history) is the backend's now: a long stream holds only
            # what the rest of it needs.
            del req, inbound
            # Errors before this point are the transport's to answer; a stop cuts the wait short.
            await interrupt.wait(call.open())
            where = request_scope.current().answered_by
            if where is not None:  # a pool's member took it: the answer says which route and upstream
                exchange.answered_by(where)
                output.add_headers(answered_headers(where))
            events = call.events()
            taken = False
            try:
                ended = await relay(events, output, exchange, self.redactor)
                taken = await output.finish(events, ended)
            finally:
                output.stop()
                if not taken:
                    await events.aclose()

    async def call(
        self, req: ResponsesRequest, inbound: Inbound, exchange: Exchange, recent: Recent | None = None
    ) -> Call:
        """The backend call for a request, with the request services around it (server/state.py).
        Raises GatewayError before anything is sent."""
        if not self.router.backends and self._on_no_upstream is not None:
            await self._on_no_upstream()
        route = self.router.resolve(req.model)
        exchange.upstream, exchange.caller = route.backend.name, inbound.caller
        prepared = await self.state.prepare(req, inbound, recent)
        call = route.backend.call(prepared.req, route.upstream_model, prepared.inbound)
        exchange.prepared = prepared
        self.observers.started(exchange)
        exchange.req = exchange.prepared = None  # for `started` only (server/exchange.py)
        return self.state.wrap(call, prepared, recent)
