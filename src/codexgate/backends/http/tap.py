"""A tap on the transport seam: what one exchange sent to its upstream and what came back, byte
for byte, for the transcript recorder (observability/recorder.py).

The tap is a `Transport` wrapped around the real one, installed only when recording is on: with
recording off nothing here runs, not even a context-variable lookup. When on, each `open()`
looks up `TAP` (set by the recorder for the request's task when the exchange starts); requests
outside an exchange (health probes, model lists) find none and pass straight through. Every
HTTP backend (Chat Completions, Responses) is tapped without a line of its own: they reach
their upstream through the transport only.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

from codexgate.backends.http.transport import Transport, UpstreamResponse
from codexgate.errors import UpstreamError

__all__ = ["TAP", "Captured", "End", "Tap", "TappedTransport"]

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
    """What one exchange's upstream traffic looked like; filled by `TappedTransport`. `limit`
    bounds the bytes kept, so a runaway answer cannot hold the process's memory."""

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


# The exchange's tap, for the task serving it (set by the recorder when the exchange starts).
TAP: ContextVar[Tap | None] = ContextVar("codexgate_upstream_tap", default=None)


class TappedTransport:
    """`inner`, with the requests made while a `TAP` is set captured into it."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner

    async def open(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        connect_timeout: float,
    ) -> UpstreamResponse:
        tap = TAP.get()
        if tap is None:
            return await self.inner.open(method, url, headers, body, connect_timeout)
        captured = Captured(method, url, dict(headers), body)
        tap.captured.append(captured)
        try:
            response = await self.inner.open(method, url, headers, body, connect_timeout)
        except UpstreamError as exc:
            captured.end, captured.error, captured.error_kind = "error", exc.message, type(exc).__name__
            raise
        captured.status = response.status
        captured.response_headers = dict(response.headers)
        return _TappedResponse(response, captured, tap)

    async def aclose(self) -> None:
        await self.inner.aclose()


class _TappedResponse:
    __slots__ = ("_inner", "_captured", "_tap", "status", "headers")

    def __init__(self, inner: UpstreamResponse, captured: Captured, tap: Tap) -> None:
        self._inner, self._captured, self._tap = inner, captured, tap
        self.status = inner.status
        self.headers = inner.headers

    def iter_chunks(self) -> AsyncIterator[bytes]:
        return _TappedChunks(aiter(self._inner.iter_chunks()), self._captured, self._tap)

    async def read(self) -> bytes:
        data = await self._inner.read()
        self._tap.keep(self._captured, data)
        self._captured.end = "eof"
        return data

    async def rest(self, seconds: float) -> None:
        await self._inner.rest(seconds)

    async def aclose(self) -> None:
        await self._inner.aclose()


class _TappedChunks:
    __slots__ = ("_chunks", "_captured", "_tap")

    def __init__(self, chunks: AsyncIterator[bytes], captured: Captured, tap: Tap) -> None:
        self._chunks, self._captured, self._tap = chunks, captured, tap

    def __aiter__(self) -> _TappedChunks:
        return self

    async def __anext__(self) -> bytes:
        captured = self._captured
        try:
            data = await anext(self._chunks)
        except StopAsyncIteration:
            captured.end = "eof"
            raise
        except asyncio.CancelledError:
            captured.end = "cancelled"
            raise
        except UpstreamError as exc:
            captured.end, captured.error, captured.error_kind = "error", exc.message, type(exc).__name__
            raise
        self._tap.keep(captured, data)
        return data

    async def aclose(self) -> None:
        """For `aclosing` (read_capped): the inner iterator is closed with the response."""
        close = getattr(self._chunks, "aclose", None)
        if close is not None:
            await close()
