"""What serving one request carries that no signature shows: the gateway's one context variable.

Four things reach code far from where they are set, across the face, the request services
(server/state.py), the backend, its turn and the transport, none of which should change its
signature for them:

- `interrupt`: set by the server around each response it delivers (server/stopping.py); the
  backend's turn ends with it (TurnOptions.interrupt, backends/base.py's `turn_options`) and
  the wait before the turn (a call's `open()`) is cut short by it.
- `tap`: set by the transcript recorder (observability/recorder.py) when an exchange starts;
  the tapped transport (backends/http/tap.py) copies the exchange's upstream traffic into it.
- `attempts`: set by the tracer (observability/tracing.py); the HTTP stream
  (backends/http/stream.py) reports each attempt to reach the upstream to it.
- `answered_by`: set by a route's pool (routing/pool.py) once a member took the request: the
  route that answered (a fallback's, perhaps) and its upstream, for the access line and metrics.

They live in one `RequestScope` per request, which the server enters for the task serving it
(`entered()`); outside a request (health probes, model lists, tests that drive a backend
directly) `current()` is an empty scope. With recording and traces off, `tap` and `attempts`
stay None: an attempt costs one lookup and nothing of OpenTelemetry is imported.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal, Protocol

from codexgate.translate.interrupt import Interrupt

__all__ = ["Attempt", "AttemptWatcher", "Captured", "End", "RequestScope", "Tap", "current", "entered"]

# How a captured answer ended: read to its end, broken by the connection, abandoned by the
# gateway while waiting for more (a timeout or the client leaving), or closed unread.
End = Literal["eof", "error", "cancelled", "closed"]


@dataclass(slots=True)
class Captured:
    """One HTTP request to the upstream and its answer as received."""

    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None
    status: int | None = None  # None: no answer (the error says why)
    response_headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)  # as the transport delivered them
    end: End = "closed"
    error: str | None = None  # the exception's class and message, when it failed
    error_kind: str | None = None
    truncated: bool = False  # the tap's byte budget ran out; later bytes are not kept


class Tap:
    """What one exchange's upstream traffic looked like. `limit` bounds the bytes kept, so a
    runaway answer cannot hold the process's memory."""

    __slots__ = ("captured", "limit", "size")

    def __init__(self, limit: int) -> None:
        self.captured: list[Captured] = []
        self.limit = limit
        self.size = 0

    def keep(self, captured: Captured, data: bytes) -> None:
        if captured.truncated:
            return
        if self.size + len(data) > self.limit:
            captured.truncated = True
            return
        self.size += len(data)
        captured.chunks.append(data)


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


@dataclass(slots=True)
class RequestScope:
    """One request's interrupt, tap, attempt watcher and where it went (each None: nobody set it)."""

    interrupt: Interrupt | None = None
    tap: Tap | None = None
    attempts: AttemptWatcher | None = None
    answered_by: tuple[str, str] | None = None  # (route, upstream)


_CURRENT: ContextVar[RequestScope | None] = ContextVar("codexgate_request_scope", default=None)


def current() -> RequestScope:
    """The scope of the request this task serves; outside one, an empty scope of its own (what
    is set on it goes nowhere: there is no request to record or trace)."""
    return _CURRENT.get() or RequestScope()


@contextmanager
def entered(interrupt: Interrupt | None = None) -> Iterator[RequestScope]:
    """A new scope for the request this task begins to serve, until the block ends."""
    scope = RequestScope(interrupt)
    token = _CURRENT.set(scope)
    try:
        yield scope
    finally:
        _CURRENT.reset(token)
