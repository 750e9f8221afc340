"""One streamed HTTP request to an upstream, for every backend that speaks HTTP (Chat
Completions, Responses): the time budgets, the retries before the first byte, the errors, and
the answer read as event-stream payloads or as one JSON body.

Two phases, so the server can answer an HTTP error while it still can: `open()` sends the
request (retrying connect errors and 5xx before the first byte) and raises a classified
GatewayError for anything that fails before the upstream accepted; `payloads()` then reads the
answer. The dialect of the payloads is the backend's business.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field

from codexgate import timeouts
from codexgate.backends import scope
from codexgate.backends.http.transport import Body, HttpRequest, Transport, UpstreamResponse, read_capped
from codexgate.backends.log import clip
from codexgate.errors import (
    Overloaded,
    RateLimited,
    UpstreamConnectError,
    UpstreamError,
    UpstreamResponseTooLarge,
    UpstreamServerError,
    UpstreamStreamCut,
    UpstreamTimeout,
)
from codexgate.translate.dialect import ChatDialect
from codexgate.translate.upstream_errors import classify
from codexgate.wire.sse import SSEDecoder, SSEEventTooLarge

__all__ = ["DONE", "HttpStream", "UpstreamTarget", "WholeBody"]

log = logging.getLogger("codexgate.backend")

DONE = b"[DONE]"
_MAX_ERROR_BODY = 64 * 1024
_DRAIN_SECONDS = 2.0  # after the terminal event, how long to wait for [DONE] to keep the connection


@dataclass(frozen=True, slots=True)
class UpstreamTarget:
    """One HTTP upstream as its backend needs it; built from config."""

    name: str
    base_url: str
    headers: Mapping[str, str]
    dialect: ChatDialect = field(default_factory=ChatDialect)
    connect_timeout: float = 10.0
    idle_timeout: float = 300.0
    max_retries: int = 2
    retry_backoff: float = 0.5
    max_retry_wait: float = 30.0
    models: tuple[str, ...] = ()  # what /v1/models lists; empty: ask the upstream
    learn_context_window: bool = True
    # Bounds on one response: characters of output (text, reasoning, tool arguments), past
    # which it ends `incomplete` (max_output_tokens), and seconds from the request to the end.
    max_output_bytes: int = 8 * 1024 * 1024
    max_request_seconds: float = 3600.0
    # Seconds to the first byte (the response headers), retries included; None: idle_timeout.
    first_byte_timeout: float | None = None
    # A 429 is waited out (its Retry-After, when within max_retry_wait and the first-byte
    # budget) and retried before the first byte, as a 5xx is; otherwise it goes to the client.
    retry_rate_limited: bool = False


@dataclass(frozen=True, slots=True)
class WholeBody:
    """An answer that was one JSON object, not an event stream (servers that ignore `stream`,
    and errors sent with a 200)."""

    body: bytes


class _IdleWatchdog:
    """Fails a wait on the upstream that outlasts its budget: the first byte must arrive by
    `first_deadline` (the request's whole first-byte budget, retries included), every later
    byte within `idle` seconds of the one before.

    One timer per stream that re-arms itself, instead of a timeout object per chunk: on a
    stream of thousands of small chunks that per-chunk cost was the largest asyncio overhead.
    `subject` names the upstream in the timeout's message."""

    def __init__(self, idle: float, first_deadline: float, started: float, subject: str) -> None:
        self._idle = idle
        self._subject = subject
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._started = started
        self._first_deadline: float | None = first_deadline  # None once a byte arrived
        self._limit: float | None = None  # when the current wait times out; None: not waiting
        self._fired = False
        self._handle = self._loop.call_at(first_deadline, self._check)

    def _check(self) -> None:
        now = self._loop.time()
        limit = self._limit
        if limit is not None and now >= limit and self._task is not None:
            self._fired = True
            self._task.cancel()
            return
        self._handle = self._loop.call_at(limit if limit is not None else now + self._idle, self._check)

    # A wait is `begin()`, the await, then `arrived()` or, if it was cancelled, `cancelled()`;
    # plain calls around the caller's own await rather than a coroutine wrapping it: one frame
    # less to resume for every upstream chunk.

    def begin(self) -> None:
        """A wait on the upstream starts now."""
        first = self._first_deadline
        self._limit = first if first is not None else self._loop.time() + self._idle

    def arrived(self) -> None:
        """The wait ended with data."""
        self._first_deadline = None
        self._limit = None

    def end(self) -> None:
        """The wait ended otherwise: the end of the body, or an error that is not a timeout."""
        self._limit = None

    def cancelled(self) -> UpstreamTimeout | None:
        """The wait was cancelled: the timeout to raise instead when this watchdog did it;
        None when someone else did (then the cancellation goes on)."""
        self._limit = None
        if self._fired and self._task is not None:
            self._task.uncancel()
            return self._timeout(self._first_deadline)
        return None

    def _timeout(self, first: float | None) -> UpstreamTimeout:
        if first is not None:
            waited = self._loop.time() - self._started
            return UpstreamTimeout(
                f"{self._subject} answered but sent no data within {waited:.1f} seconds of the request "
                f"(idle timeout {self._idle:g} s)."
            )
        return UpstreamTimeout(f"{self._subject} sent nothing for {self._idle:g} seconds (idle timeout).")

    def close(self) -> None:
        self._handle.cancel()


class HttpStream:
    """One POST of `body` to `target.base_url + path`, from `open()` to the end of its answer.
    `counts` (the backend's) tallies failed attempts (`upstream.error.<code>`) and retries
    (`upstream.retry`)."""

    def __init__(
        self,
        transport: Transport,
        target: UpstreamTarget,
        path: str,
        body: Body,
        counts: Counter[str] | None = None,
        max_retries: int | None = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """`max_retries`: fewer retries than the target's for this request (a pool's member
        while another can answer: the pool fails over at once instead). `headers`: this
        request's own, over the target's."""
        self._transport = transport
        limit = target.max_retries if max_retries is None else max_retries
        self._max_retries = min(target.max_retries, limit)
        self._counts: Counter[str] = Counter() if counts is None else counts
        self._attempt: scope.Attempt | None = None  # the attempt that answered, while read
        self._target = target
        self._url = target.base_url.rstrip("/") + path
        self._body = body
        self._headers = headers
        self._response: UpstreamResponse | None = None
        self._chunks: AsyncIterator[bytes] | None = None
        self._watchdog: _IdleWatchdog | None = None
        self._started = 0.0  # loop time when open() began
        self._first_byte_deadline = 0.0
        self._deadline = float("inf")  # loop time by which the response must have ended

    def rewrite(self, body: Body) -> None:
        """Send `body` instead (before `open()`: a dialect that lowered what it asks for)."""
        self._body = body

    @property
    def _first_byte_budget(self) -> float:
        return self._target.first_byte_timeout or self._target.idle_timeout

    @property
    def _budget_name(self) -> str:
        return "first byte timeout" if self._target.first_byte_timeout else "idle timeout"

    @property
    def subject(self) -> str:
        """The upstream as messages name it: its configured name and URL."""
        return f"upstream {self._target.name!r} ({self._target.base_url})"

    @property
    def headers(self) -> Mapping[str, str]:
        """The answer's headers (once open)."""
        assert self._response is not None, "open() first"
        return self._response.headers

    def start_clock(self) -> None:
        """The request's budgets start now (`open()` starts them if nobody did: a backend that
        probes the upstream before sending starts them first, so the probe counts)."""
        if self._started:
            return
        target = self._target
        self._started = asyncio.get_running_loop().time()
        self._first_byte_deadline = self._started + self._first_byte_budget
        self._deadline = self._started + target.max_request_seconds

    async def open(self) -> None:
        """Send the request. Raises GatewayError (already classified) if the upstream refuses.

        The idle timeout is a budget for the whole request, retries included: the first upstream
        byte must come within it of this call, however many attempts that takes, so a server
        that accepts connections and never answers fails after `idle_timeout`, not after
        (connect + idle) x attempts."""
        self.start_clock()
        target = self._target
        loop = asyncio.get_running_loop()
        headers = {"content-type": "application/json", "accept": "text/event-stream", **target.headers}
        if self._headers:
            headers.update(self._headers)
        watcher = scope.current().attempts  # None unless traces are on
        attempt = 0
        while True:
            watched = watcher.attempt(target.name, self._url, attempt) if watcher is not None else None
            status: int | None = None
            try:
                response = await self._open_once(headers, attempt)
                status = response.status
                if status == 200:
                    self._response = response
                    self._body = b""  # sent; orjson over-allocates, so don't hold it for the stream
                    self._attempt = watched  # ends with the answer, in aclose()
                    return
                error = await self._error_from(response)
                # 5xx before the first byte (503 "loading model" included) is worth a retry,
                # unless its body says something final such as a context overflow.
                retryable = status >= 500 and isinstance(error, (UpstreamServerError, Overloaded))
                if status == 429 and target.retry_rate_limited and isinstance(error, RateLimited):
                    retryable = True  # after its Retry-After (1 s when it gives none)
            except UpstreamError as exc:
                error, retryable = exc, exc.retryable
            except BaseException:  # cancelled (the client left), or a bug: the attempt is over
                if watched is not None:
                    watched.end(status, "cancelled")
                raise
            self._counts[f"upstream.error.{error.code}"] += 1
            if watched is not None:
                watched.end(status, error.code)
            if not retryable or attempt >= self._max_retries:
                raise error
            if error.retry_after is not None:
                wait = error.retry_after
            elif attempt == 0 and isinstance(error, UpstreamConnectError):
                wait = 0.0  # most often a pooled connection the server had just closed
            else:
                wait = target.retry_backoff * 2**attempt * random.uniform(0.9, 1.1)
            if wait > target.max_retry_wait or loop.time() + wait >= self._first_byte_deadline:
                raise error  # no time left in the request's budget for another attempt
            attempt += 1
            self._counts["upstream.retry"] += 1
            said = error.message.rstrip(".") if error.reason else f"{self.subject}: {error.message}"
            log.info("%s; retry %d in %.2fs", said, attempt, wait)
            await asyncio.sleep(wait)

    async def _open_once(self, headers: dict[str, str], attempt: int) -> UpstreamResponse:
        """One attempt, within what is left of the request's first-byte budget. An upstream that
        accepts the connection but sends no headers counts as idle, like one that stops
        mid-stream."""
        target = self._target
        loop = asyncio.get_running_loop()
        remaining = self._first_byte_deadline - loop.time()
        try:
            with timeouts.timeout_at(self._first_byte_deadline):
                connect_timeout = min(target.connect_timeout, max(remaining, 0.001))
                request = HttpRequest("POST", self._url, headers, self._body, connect_timeout)
                return await self._transport.open(request)
        except TimeoutError:
            attempts = f"{attempt + 1} attempts" if attempt else "1 attempt"
            raise UpstreamTimeout(
                f"{self.subject} sent no response within {loop.time() - self._started:.1f} seconds "
                f"({self._budget_name} {self._first_byte_budget:g} s, {attempts})."
            ) from None
        except UpstreamError as exc:
            if exc.reason is None:
                raise
            # The transport says what failed; the message says which upstream, in plain words.
            named = type(exc)(f"{self.subject} {exc.reason}.", code=exc.code, retry_after=exc.retry_after)
            named.reason = exc.reason
            raise named from exc.__cause__

    async def _error_from(self, response: UpstreamResponse) -> UpstreamError:
        """The upstream's error, from the first 64 KB of its body (the rest is never read)."""
        try:
            capped = read_capped(response, _MAX_ERROR_BODY)
            body, _ = await asyncio.wait_for(capped, self._target.connect_timeout)
        except (TimeoutError, UpstreamError):
            body = b""
        finally:
            await response.aclose()
        return classify(response.status, body, response.headers, self._url, upstream=self._target.name)

    async def payloads(self) -> AsyncGenerator[list[bytes] | WholeBody, None]:
        """The answer: event-stream payloads as they come (a list per read; `[DONE]` included),
        or, once the body ended, a `WholeBody` when it was one JSON object. The first byte that
        is not white space tells (an event stream cannot start with `{`; content types lie).
        Raises UpstreamError: timeouts, a broken connection, a line, event or body too large.
        Ends at the end of the body, after the decoder's last payloads."""
        response = self._response
        assert response is not None, "open() first"
        chunks = self._chunks = aiter(response.iter_chunks())
        decoder = SSEDecoder()
        loop = asyncio.get_running_loop()
        target = self._target
        whole: list[bytes] | None = None  # the body so far, once it is known to be JSON
        sniffing = True
        whole_size = 0
        whole_cap = 2 * target.max_output_bytes + _MAX_ERROR_BODY  # JSON escapes add bytes
        while True:
            try:
                raw = await self._next_chunk(chunks)
            except StopAsyncIteration:
                if whole is not None:
                    yield WholeBody(b"".join(whole))
                else:
                    tail = self._decode(decoder, None)
                    if tail:
                        yield tail
                return
            if loop.time() > self._deadline:
                # Checked as bytes arrive, so a stream of keep-alive comments, or one that
                # never ends, ends here; a silent upstream is ended by the idle timeout.
                raise UpstreamTimeout(
                    f"The response took longer than its total budget of "
                    f"{target.max_request_seconds:g} seconds (max_request_seconds)."
                )
            if sniffing and raw.strip():
                sniffing = False
                if raw.lstrip()[:1] == b"{":
                    whole = []
            if whole is not None:
                whole.append(raw)
                whole_size += len(raw)
                if whole_size > whole_cap:
                    raise UpstreamResponseTooLarge(
                        f"The upstream's JSON answer is larger than {whole_cap} bytes."
                    )
                continue
            payloads = self._decode(decoder, raw)
            if payloads:
                yield payloads

    @staticmethod
    def _decode(decoder: SSEDecoder, raw: bytes | None) -> list[bytes]:
        """Payloads from the next bytes (None: the end). Raises UpstreamResponseTooLarge."""
        try:
            return decoder.feed(raw) if raw is not None else decoder.finish()
        except SSEEventTooLarge as exc:
            raise UpstreamResponseTooLarge(
                f"The upstream sent an event-stream line or event larger than {exc.limit} bytes."
            ) from None

    async def _next_chunk(self, chunks: AsyncIterator[bytes]) -> bytes:
        """The next upstream bytes. Only this wait counts as upstream idleness: time the client
        takes to read what was already sent does not. Raises StopAsyncIteration at EOF."""
        watchdog = self._watchdog
        if watchdog is None:
            watchdog = self._watchdog = _IdleWatchdog(
                self._target.idle_timeout, self._first_byte_deadline, self._started, self.subject
            )
        watchdog.begin()
        try:
            data = await anext(chunks)
        except asyncio.CancelledError:
            timeout = watchdog.cancelled()
            if timeout is not None:
                raise timeout from None
            raise
        except UpstreamConnectError as exc:
            watchdog.end()
            what = exc.reason or "broke the connection"
            cut = UpstreamStreamCut(f"{self.subject} {what}, before the model finished.")
            log.info("%s", cut.message)
            raise cut from None
        except BaseException:
            watchdog.end()
            raise
        watchdog.arrived()
        return data

    async def rest(self, seconds: float) -> None:
        """Read nothing for `seconds` (the upstream's events wait in the socket meanwhile). Not
        idleness: the idle timeout counts only waits for bytes."""
        assert self._response is not None, "open() first"
        await self._response.rest(seconds)

    async def drain(self) -> None:
        """Read what follows the terminal event ([DONE]) so the connection can be reused."""
        chunks = self._chunks
        if chunks is None:
            return
        try:
            with timeouts.timeout(_DRAIN_SECONDS):
                async for _ in chunks:
                    pass
        except (TimeoutError, UpstreamError):
            pass

    async def aclose(self) -> None:
        """Stop the watchdog and close the answer (cancels the upstream request if unread)."""
        if self._watchdog is not None:
            self._watchdog.close()
        if self._attempt is not None:
            self._attempt.end(200)
            self._attempt = None
        if self._response is not None:
            await self._response.aclose()


def describe_json(raw: bytes) -> str:
    """A JSON answer that is neither of the shapes a backend expects, for its error message."""
    return clip(raw, 200)
