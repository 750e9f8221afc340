"""Who watches each attempt to reach an upstream: with traces on (observability/tracing.py), a child
span per attempt under the request's span.

A context variable, set by the tracing observer when a request starts and read by
backends/http/stream.py around each attempt, rather than a parameter threaded through faces,
state services and backends: no backend changes its signature for it, and with traces off the
variable holds None, so an attempt costs one `ContextVar.get()` and nothing of OpenTelemetry
is imported.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol

__all__ = ["Attempt", "AttemptWatcher", "watcher"]


class Attempt(Protocol):
    """One attempt, from sending the request to the end of its answer."""

    def end(self, status: int | None = None, error: str | None = None) -> None:
        """The attempt is over: the upstream's HTTP status if it answered (None: no answer),
        the error code if it failed. A second call does nothing."""
        ...


class AttemptWatcher(Protocol):
    def attempt(self, upstream: str, url: str, number: int) -> Attempt:
        """Attempt `number` (0 first, 1 the first retry...) to POST to `url` of `upstream`
        starts now."""
        ...


# The current request's watcher; None: nobody watches (traces off, or outside a request).
watcher: ContextVar[AttemptWatcher | None] = ContextVar("codexgate_attempt_watcher", default=None)
