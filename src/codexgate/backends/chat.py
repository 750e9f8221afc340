"""The Chat Completions backend: canonical request in, canonical event stream out.

Two phases, so the server can answer an HTTP error while it still can:
`open()` sends the request (retrying connect errors and 5xx before the first byte) and raises a
GatewayError for anything that fails before the upstream accepted; `events()` then yields
batches of Responses events and always ends with a terminal event, whatever the upstream does.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass

import orjson

from codexgate.backends.server_info import ContextWindows
from codexgate.backends.transport import Transport, UpstreamResponse
from codexgate.errors import (
    ContextLengthExceeded,
    GatewayError,
    Overloaded,
    UpstreamConnectError,
    UpstreamError,
    UpstreamServerError,
    UpstreamStreamCut,
    UpstreamTimeout,
)
from codexgate.translate.content import ContentStage
from codexgate.translate.dialect import ChatDialect
from codexgate.translate.envelope import Envelope
from codexgate.translate.request import to_chat_request
from codexgate.translate.stream import ChatStreamTranslator, Event
from codexgate.translate.upstream_errors import classify
from codexgate.wire.responses import ResponsesRequest
from codexgate.wire.sse import SSEDecoder

log = logging.getLogger("codexgate.backend")

_DONE = b"[DONE]"
_MAX_ERROR_BODY = 64 * 1024
_MAX_BYTES_PER_TOKEN = 6
_DRAIN_SECONDS = 2.0  # after the terminal event, how long to wait for [DONE] to keep the connection


@dataclass(frozen=True, slots=True)
class UpstreamTarget:
    """One upstream as the backend needs it; built from config."""

    name: str
    base_url: str
    headers: Mapping[str, str]
    dialect: ChatDialect
    connect_timeout: float = 10.0
    idle_timeout: float = 300.0
    max_retries: int = 2
    retry_backoff: float = 0.5
    max_retry_wait: float = 30.0
    models: tuple[str, ...] = ()  # what /v1/models lists; empty: ask the upstream
    learn_context_window: bool = True


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class OnceLog:
    """Logs each distinct message once per process (for dropped tool kinds and the like)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def warning(self, message: str) -> None:
        if message not in self._seen:
            self._seen.add(message)
            log.warning(message)


class _IdleWatchdog:
    """Fails a wait on the upstream that lasts `idle` seconds.

    One timer per stream that re-arms itself, instead of a timeout object per chunk: on a
    stream of thousands of small chunks that per-chunk cost was the largest asyncio overhead."""

    def __init__(self, idle: float) -> None:
        self._idle = idle
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._since: float | None = None  # when the current wait began; None: not waiting
        self._fired = False
        self._handle = self._loop.call_later(idle, self._check)

    def _check(self) -> None:
        now = self._loop.time()
        since = self._since
        if since is not None and now - since >= self._idle and self._task is not None:
            self._fired = True
            self._task.cancel()
            return
        self._handle = self._loop.call_at((since if since is not None else now) + self._idle, self._check)

    async def wait(self, step: Awaitable[bytes]) -> bytes:
        """Raises UpstreamTimeout when the wait outlasts the idle limit."""
        self._since = self._loop.time()
        try:
            return await step
        except asyncio.CancelledError:
            if self._fired and self._task is not None:
                self._task.uncancel()
                raise UpstreamTimeout(
                    f"The upstream sent nothing for {self._idle:g} seconds (idle timeout)."
                ) from None
            raise
        finally:
            self._since = None

    def close(self) -> None:
        self._handle.cancel()


class ChatCall:
    """One request to a chat upstream, from `open()` to the last event."""

    def __init__(
        self,
        backend: ChatBackend,
        req: ResponsesRequest,
        upstream_model: str,
    ) -> None:
        self._backend = backend
        self._target = backend.target
        dialect = self._target.dialect
        chat = to_chat_request(req, dialect, upstream_model)
        self._upstream_model = upstream_model
        for kind in chat.tool_map.skipped_kinds:
            backend.once.warning(f"tool kind {kind!r} cannot run on a chat upstream; left out")
        for kind in chat.dropped_items:
            backend.once.warning(f"input item type {kind!r} has no chat form; left out")
        self._body = orjson.dumps(chat.body)
        created = int(time.time())
        self.envelope = Envelope.for_request(req, new_id("resp"), created)
        self.translator = ChatStreamTranslator(
            self.envelope,
            chat.tool_map,
            new_id,
            input_token_estimate=len(self._body) // 4,
            now=lambda: int(time.time()),
            content=ContentStage(
                chat.tool_map.schemas,
                think=dialect.think_tags,
                text_calls=dialect.text_tool_calls,
                counts=backend.counts,
            ),
            counts=backend.counts,
            loop_guard=dialect.loop_guard,
        )
        self._response: UpstreamResponse | None = None
        self._watchdog: _IdleWatchdog | None = None

    def _check_fits(self, window: int | None) -> None:
        """Refuse a request that cannot fit the model's window. The bound is deliberately low
        (6 bytes a token; tokenizers average 3-4.5 on code and prose, JSON escaping only adds
        bytes), so only requests that clearly overflow are refused; the rest is the upstream's
        call."""
        lower_bound = len(self._body) // _MAX_BYTES_PER_TOKEN
        if window and lower_bound > window:
            raise ContextLengthExceeded(
                f"This request needs at least {lower_bound} tokens, more than the model's context window "
                f"of {window} tokens. Compact or shorten the conversation."
            )

    async def open(self) -> None:
        """Send the request. Raises GatewayError (already classified) if the upstream refuses."""
        target = self._target
        window = target.dialect.context_window
        if window is None and self._backend.windows is not None:
            window = await self._backend.windows.get(self._upstream_model)
        self._check_fits(window)
        url = target.base_url.rstrip("/") + "/chat/completions"
        headers = {"content-type": "application/json", "accept": "text/event-stream", **target.headers}
        attempt = 0
        while True:
            try:
                response = await self._open_once(url, headers)
                if response.status == 200:
                    self._response = response
                    self._body = b""  # sent; orjson over-allocates, so don't hold it for the stream
                    return
                error = await self._error_from(response)
                # 5xx before the first byte (503 "loading model" included) is worth a retry,
                # unless its body says something final such as a context overflow.
                retryable = response.status >= 500 and isinstance(error, (UpstreamServerError, Overloaded))
            except UpstreamError as exc:
                error, retryable = exc, exc.retryable
            if not retryable or attempt >= target.max_retries:
                raise error
            if error.retry_after is not None:
                wait = error.retry_after
            elif attempt == 0 and isinstance(error, UpstreamConnectError):
                wait = 0.0  # most often a pooled connection the server had just closed
            else:
                wait = target.retry_backoff * 2**attempt * random.uniform(0.9, 1.1)
            if wait > target.max_retry_wait:
                raise error
            attempt += 1
            log.info("upstream %s: %s; retry %d in %.2fs", target.name, error.message, attempt, wait)
            await asyncio.sleep(wait)

    async def _open_once(self, url: str, headers: dict[str, str]) -> UpstreamResponse:
        """One attempt. An upstream that accepts the connection but sends no headers counts as
        idle, like one that stops mid-stream: bounded by the idle timeout."""
        target = self._target
        try:
            async with asyncio.timeout(target.connect_timeout + target.idle_timeout):
                return await self._backend.transport.open(
                    "POST", url, headers, self._body, target.connect_timeout
                )
        except TimeoutError:
            raise UpstreamTimeout(
                f"The upstream sent no response for {target.idle_timeout:g} seconds (idle timeout)."
            ) from None

    async def _error_from(self, response: UpstreamResponse) -> UpstreamError:
        try:
            body = await asyncio.wait_for(response.read(), self._target.connect_timeout)
        except (TimeoutError, UpstreamError):
            body = b""
        finally:
            await response.aclose()
        return classify(response.status, body[:_MAX_ERROR_BODY], response.headers, self._target.name)

    async def events(self) -> AsyncGenerator[list[Event], None]:
        """Batches of events, first `response.created`; the last batch holds the terminal event.
        Cancelling the iteration (client gone) closes the upstream request."""
        translator = self.translator
        response = self._response
        assert response is not None, "open() first"
        yield translator.start()
        try:
            async for batch in self._translate(response):
                if batch:
                    yield batch
        except GatewayError as exc:
            yield translator.fail(exc)
        except Exception as exc:  # a bug must still end the stream well-formed
            log.exception("unexpected error while streaming")
            yield translator.fail(GatewayError(f"internal gateway error: {type(exc).__name__}"))
        finally:
            if self._watchdog is not None:
                self._watchdog.close()
            await response.aclose()

    async def _translate(self, response: UpstreamResponse) -> AsyncIterator[list[Event]]:
        decoder = SSEDecoder()
        chunks = aiter(response.iter_chunks())
        while True:
            events: list[Event] = []
            try:
                try:
                    raw = await self._next_chunk(chunks)
                except StopAsyncIteration:
                    self._feed(decoder.finish(), events)
                    events.extend(self.translator.finish())
                    yield events
                    return
                self._feed(decoder.feed(raw), events)
            except GatewayError:
                # What this read produced before the failure still goes out, then fail()'s
                # events close it: no event numbers are skipped.
                events.extend(self.translator.pending_events)
                if events:
                    yield events
                raise
            if events:
                yield events
            if self.translator.done:
                await self._drain(chunks)
                return

    def _feed(self, payloads: list[bytes], events: list[Event]) -> None:
        """Translate decoded SSE payloads, appending to `events` as it goes."""
        translator = self.translator
        for data in payloads:
            if data == _DONE:
                events.extend(translator.end_of_stream_marker())
                return
            try:
                chunk = orjson.loads(data)
            except orjson.JSONDecodeError:
                # Not JSON: noise, or the fragment of an event cut by a dropped connection
                # (then finish() reports the cut).
                log.warning("upstream sent data that is not JSON: %.200r", data)
                continue
            events.extend(translator.feed(chunk))

    async def _next_chunk(self, chunks: AsyncIterator[bytes]) -> bytes:
        """The next upstream bytes. Only this wait counts as upstream idleness: time the client
        takes to read what was already sent does not. Raises StopAsyncIteration at EOF."""
        watchdog = self._watchdog
        if watchdog is None:
            watchdog = self._watchdog = _IdleWatchdog(self._target.idle_timeout)
        try:
            return await watchdog.wait(anext(chunks))
        except UpstreamConnectError as exc:
            log.info("upstream %s: %s", self._target.name, exc.message)
            raise UpstreamStreamCut("The upstream connection broke before the model finished.") from None

    async def _drain(self, chunks: AsyncIterator[bytes]) -> None:
        """Read what follows the terminal event ([DONE]) so the connection can be reused."""
        try:
            async with asyncio.timeout(_DRAIN_SECONDS):
                async for _ in chunks:
                    pass
        except (TimeoutError, UpstreamError):
            pass


class ChatBackend:
    """An upstream as one model route sees it (its dialect includes the route's overrides).
    Routes of one upstream share `counts` (repairs and checks tallied) and `windows`."""

    def __init__(
        self,
        target: UpstreamTarget,
        transport: Transport,
        once: OnceLog | None = None,
        counts: Counter[str] | None = None,
        windows: ContextWindows | None = None,
    ) -> None:
        self.target = target
        self.transport = transport
        self.once = once or OnceLog()
        self.counts: Counter[str] = Counter() if counts is None else counts
        if windows is None and target.learn_context_window:
            probe_timeout = min(target.connect_timeout, 5.0)
            windows = ContextWindows(transport, target.base_url, target.headers, probe_timeout, target.name)
        self.windows = windows

    def call(self, req: ResponsesRequest, upstream_model: str) -> ChatCall:
        """Raises ValueError for a dialect naming an unknown text tool-call format."""
        return ChatCall(self, req, upstream_model)
