"""What a backend is, as the server and the router see it: the one seam between a face and
whatever produces the canonical event stream (a chat upstream today; a Responses upstream or
`codex app-server` later).

`server/` and `routing.py` are written against these protocols only, never against a concrete
backend, so a new kind of upstream needs a module in `backends/` and a line in `app.py`'s
table, not a change to the server.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncGenerator
from typing import Protocol

from codexgate.backends.model_list import ModelList
from codexgate.wire.responses import ResponsesRequest
from codexgate.wire.responses_events import Event

__all__ = ["Backend", "Call", "ContextWindowsView", "Event", "ModelList"]


class Call(Protocol):
    """One request to a backend, from `open()` to the last event."""

    async def open(self) -> None:
        """Send the request. Raises GatewayError (already classified) for anything that fails
        before the first byte of the answer: the server still answers with an HTTP status."""
        ...

    def events(self) -> AsyncGenerator[list[Event], None]:
        """Batches of canonical Responses events, first `response.created`. Always ends with
        exactly one terminal event (`response.completed`, `.incomplete` or `.failed`), whatever
        the upstream does; errors after `open()` become `response.failed`, never exceptions.
        Closing the generator (client gone) cancels the upstream request."""
        ...


class ContextWindowsView(Protocol):
    def known(self) -> dict[str, int]:
        """Context windows learned so far, by upstream model id."""
        ...


class Backend(Protocol):
    """An upstream as one model route sees it."""

    @property
    def name(self) -> str:
        """The upstream's configured name."""
        ...

    @property
    def base_url(self) -> str:
        """Where the upstream is (may hold credentials: redact before showing)."""
        ...

    @property
    def counts(self) -> Counter[str]:
        """What the gateway repaired or recognised on this upstream, by kind (for /healthz)."""
        ...

    @property
    def windows(self) -> ContextWindowsView | None:
        """The context windows learned from the upstream; None when not learned."""
        ...

    def call(self, req: ResponsesRequest, upstream_model: str) -> Call:
        """Prepare one request (nothing is sent before `open()`)."""
        ...

    async def model_ids(self) -> list[str]:
        """The upstream's own model ids (for an unrouted /v1/models); [] when it cannot tell."""
        ...

    async def reachability(self) -> ModelList:
        """Whether the upstream answers and serves models; cached briefly (monitors poll)."""
        ...
