"""A tap on the transport seam: what one exchange sent to its upstream and what came back, byte
for byte, for the transcript recorder (observability/recorder.py).

The tap is a `Transport` wrapped around the real one, installed only when recording is on: with
recording off nothing here runs, not even a context-variable lookup. When on, each `open()`
looks up the request's `tap` (backends/scope.py: set by the recorder when the exchange starts);
requests outside an exchange (health probes, model lists) find none and pass straight through.
Every HTTP backend (Chat Completions, Responses) is tapped without a line of its own: they
reach their upstream through the transport only.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from codexgate.backends import scope
from codexgate.backends.http.transport import HttpRequest, Transport, UpstreamResponse, body_bytes
from codexgate.backends.scope import Captured, Tap
from codexgate.errors import UpstreamError

__all__ = ["TappedTransport"]


class TappedTransport:
    """`inner`, with the requests made for a request whose scope has a tap captured into it."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner

    async def open(self, request: HttpRequest) -> UpstreamResponse:
        tap = scope.current().tap
        if tap is None:
            return await self.inner.open(request)
        captured = Captured(request.method, request.url, dict(request.headers), body_bytes(request.body))
        tap.captured.append(captured)
        try:
            response = await self.inner.open(request)
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
