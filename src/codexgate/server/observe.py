"""What the gateway shows of its work besides the access line: observers of each exchange
(metrics, traces, the transcript recorder, the live view) see it start, optionally every batch
of events, and end.

The hot path pays for what is watched only: with no observer asking for batches, a stream's
events are not looked at again (`Exchange.watch` stays None); the start and the end of a request
cost one call per observer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from codexgate.server.exchange import Exchange
from codexgate.wire.responses_events import Event

log = logging.getLogger("codexgate.observe")


class Observer:
    """Override what is needed. An observer never raises into the request: a bug in one is
    logged and the request goes on."""

    def started(self, exchange: Exchange) -> None:
        """The request was read (`exchange.req` is set, for this call only) and routed
        (`exchange.upstream`)."""

    def wants_batches(self, exchange: Exchange) -> bool:
        """Whether `batch` should see this exchange's events (asked once, at its start)."""
        return False

    def batch(self, exchange: Exchange, events: list[Event]) -> None:
        """A batch of the answer's events, as delivered (before encoding)."""

    def finished(self, exchange: Exchange) -> None:
        """The exchange ended, however it ended (`exchange.outcome`, `exchange.terminal`)."""


class Observers:
    """The app's observers, called in order."""

    def __init__(self, observers: Sequence[Observer] = ()) -> None:
        self.all = list(observers)

    def add(self, observer: Observer) -> None:
        self.all.append(observer)

    def started(self, exchange: Exchange) -> None:
        watching: list[Observer] = []
        for observer in self.all:
            try:
                observer.started(exchange)
                if observer.wants_batches(exchange):
                    watching.append(observer)
            except Exception:
                log.exception("observer %s failed at the start of a request", type(observer).__name__)
        if watching:
            exchange.watch = _fan_out(exchange, watching)

    def finished(self, exchange: Exchange) -> None:
        for observer in self.all:
            try:
                observer.finished(exchange)
            except Exception:
                log.exception("observer %s failed at the end of a request", type(observer).__name__)


def _fan_out(exchange: Exchange, watching: list[Observer]) -> Callable[[list[Event]], None]:
    def watch(events: list[Event]) -> None:
        for observer in watching:
            try:
                observer.batch(exchange, events)
            except Exception:
                log.exception("observer %s failed on a batch", type(observer).__name__)

    return watch
