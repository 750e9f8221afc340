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
from collections import Counter, OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass

import orjson

from codexgate.backends.model_list import ModelList, list_models
from codexgate.backends.server_info import ContextWindows, fetch_json, model_entries
from codexgate.backends.transport import Transport, UpstreamResponse, read_capped
from codexgate.errors import (
    ContextLengthExceeded,
    GatewayError,
    Overloaded,
    UpstreamConnectError,
    UpstreamError,
    UpstreamResponseTooLarge,
    UpstreamServerError,
    UpstreamStreamCut,
    UpstreamTimeout,
)
from codexgate.memo import Memo
from codexgate.translate.dialect import ChatDialect
from codexgate.translate.envelope import Envelope
from codexgate.translate.request import ChatRequest, Checkpoint, to_chat_request
from codexgate.translate.stages import build_pipeline
from codexgate.translate.stream import ChatStreamTranslator, Event
from codexgate.translate.upstream_errors import classify
from codexgate.wire.responses import ResponsesRequest
from codexgate.wire.sse import SSEDecoder, SSEEventTooLarge

log = logging.getLogger("codexgate.backend")

_DONE = b"[DONE]"
_MAX_ERROR_BODY = 64 * 1024
_MAX_BYTES_PER_TOKEN = 6
_DRAIN_SECONDS = 2.0  # after the terminal event, how long to wait for [DONE] to keep the connection
_HEALTH_PROBE_SECONDS = 2.0
_HEALTH_CACHE_SECONDS = 5.0
# Past this much output, each event of a batch goes out on its own, so the deliverer encodes
# one `done` event (each holds the whole text) at a time instead of all four at once.
_SPLIT_BATCHES_ABOVE = 1024 * 1024
_LOGGED_CHARS = 80  # of a client- or upstream-chosen string in a log message
_LOGGED_KINDS = 8  # dropped tool kinds or item types logged per request


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
    # Bounds on one response: characters of output (text, reasoning, tool arguments), past
    # which it ends `incomplete` (max_output_tokens), and seconds from the request to the end.
    max_output_bytes: int = 8 * 1024 * 1024
    max_request_seconds: float = 3600.0


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def clip(value: object, limit: int = _LOGGED_CHARS) -> str:
    """A client- or upstream-chosen string for a log message: repr-escaped (no control
    characters reach the log) and cut to `limit` characters."""
    text = value if isinstance(value, str) else str(value)
    shown = repr(text[:limit])
    return shown if len(text) <= limit else shown + f"...({len(text)} chars)"


class OnceLog:
    """Logs each distinct message once (for dropped tool kinds and the like). Remembers the
    last `max_entries` messages: clients choose parts of them, so memory must stay bounded;
    a forgotten message may be logged again, which costs one bounded line."""

    def __init__(self, max_entries: int = 256) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._max = max_entries

    def warning(self, message: str) -> None:
        if message in self._seen:
            self._seen.move_to_end(message)
            return
        self._seen[message] = None
        if len(self._seen) > self._max:
            self._seen.popitem(last=False)
        log.warning(message)


class _IdleWatchdog:
    """Fails a wait on the upstream that outlasts its budget: the first byte must arrive by
    `first_deadline` (the request's whole first-byte budget, retries included), every later
    byte within `idle` seconds of the one before.

    One timer per stream that re-arms itself, instead of a timeout object per chunk: on a
    stream of thousands of small chunks that per-chunk cost was the largest asyncio overhead."""

    def __init__(self, idle: float, first_deadline: float, started: float) -> None:
        self._idle = idle
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
                f"The upstream answered but sent no data within {waited:.1f} seconds of the request "
                f"(idle timeout {self._idle:g} s)."
            )
        return UpstreamTimeout(f"The upstream sent nothing for {self._idle:g} seconds (idle timeout).")

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
        history = backend.history
        key = (backend, req.history_key)
        earlier = history.get(key) if history is not None and req.history_key else None
        chat = to_chat_request(req, dialect, upstream_model, earlier)
        self._upstream_model = upstream_model
        # Client-chosen strings: clipped, and a few per request at most.
        for kind in dict.fromkeys(chat.tool_map.skipped_kinds[:_LOGGED_KINDS]):
            backend.once.warning(f"tool kind {clip(kind)} cannot run on a chat upstream; left out")
        for kind in dict.fromkeys(chat.dropped_items[:_LOGGED_KINDS]):
            backend.once.warning(f"input item type {clip(kind)} has no chat form; left out")
        self._body = chat.encode()
        self._input_bytes = len(self._body)
        if history is not None and req.history_key:
            history.put(key, chat.checkpoint, req.body_size or len(self._body))
        # The translator is made once the request is out (open()): until the upstream's
        # first byte, the gateway has time to spare; before sending, every microsecond adds
        # to the time to first token.
        self._unsent: tuple[ResponsesRequest, ChatRequest] | None = (req, chat)
        self._translator: ChatStreamTranslator | None = None
        self._response: UpstreamResponse | None = None
        self._watchdog: _IdleWatchdog | None = None
        self._started = 0.0  # loop time when open() began
        self._first_byte_deadline = 0.0
        self._deadline = float("inf")  # loop time by which the response must have ended
        self._noise_logged = False

    @property
    def translator(self) -> ChatStreamTranslator:
        """The stream translator; made by open()."""
        assert self._translator is not None, "open() first"
        return self._translator

    def _make_translator(self) -> None:
        assert self._unsent is not None
        req, chat = self._unsent
        self._unsent = None
        backend, dialect = self._backend, self._target.dialect
        envelope = Envelope.for_request(
            req, new_id("resp"), int(time.time()), sent=chat.body, unavailable_tools=chat.tool_map.unavailable
        )
        stages = build_pipeline(
            chat.tool_map,
            think_tags=dialect.think_tags,
            text_tool_calls=dialect.text_tool_calls,
            loop_guard=dialect.loop_guard,
            counts=backend.counts,
            input_token_estimate=self._input_bytes // 4,
        )
        self._translator = ChatStreamTranslator(
            envelope,
            chat.tool_map,
            new_id,
            now=lambda: int(time.time()),
            counts=backend.counts,
            stages=stages,
        )

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
        """Send the request. Raises GatewayError (already classified) if the upstream refuses.

        The idle timeout is a budget for the whole request, retries included: the first upstream
        byte must come within it of this call, however many attempts that takes, so a server
        that accepts connections and never answers fails after `idle_timeout`, not after
        (connect + idle) x attempts."""
        target = self._target
        loop = asyncio.get_running_loop()
        self._started = loop.time()
        self._first_byte_deadline = self._started + target.idle_timeout
        self._deadline = self._started + target.max_request_seconds
        window = target.dialect.context_window
        windows = self._backend.windows
        if window is None and windows is not None:
            known, window = windows.remembered(self._upstream_model)
            if not known:
                try:  # at most half the budget: a server deaf to probes may still answer chat
                    async with asyncio.timeout(target.idle_timeout / 2):
                        window = await windows.get(self._upstream_model)
                except TimeoutError:
                    window = None
        self._check_fits(window)
        url = target.base_url.rstrip("/") + "/chat/completions"
        headers = {"content-type": "application/json", "accept": "text/event-stream", **target.headers}
        attempt = 0
        while True:
            try:
                response = await self._open_once(url, headers, attempt)
                if response.status == 200:
                    self._response = response
                    self._body = b""  # sent; orjson over-allocates, so don't hold it for the stream
                    try:
                        self._make_translator()
                    except BaseException:
                        await response.aclose()  # no stream will read it
                        raise
                    return
                error = await self._error_from(response, url)
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
            if wait > target.max_retry_wait or loop.time() + wait >= self._first_byte_deadline:
                raise error  # no time left in the request's budget for another attempt
            attempt += 1
            log.info("upstream %s: %s; retry %d in %.2fs", target.name, error.message, attempt, wait)
            await asyncio.sleep(wait)

    async def _open_once(self, url: str, headers: dict[str, str], attempt: int) -> UpstreamResponse:
        """One attempt, within what is left of the request's first-byte budget. An upstream that
        accepts the connection but sends no headers counts as idle, like one that stops
        mid-stream."""
        target = self._target
        loop = asyncio.get_running_loop()
        remaining = self._first_byte_deadline - loop.time()
        try:
            async with asyncio.timeout_at(self._first_byte_deadline):
                return await self._backend.transport.open(
                    "POST", url, headers, self._body, min(target.connect_timeout, max(remaining, 0.001))
                )
        except TimeoutError:
            attempts = f"{attempt + 1} attempts" if attempt else "1 attempt"
            raise UpstreamTimeout(
                f"The upstream sent no response within {loop.time() - self._started:.1f} seconds "
                f"(idle timeout {target.idle_timeout:g} s, {attempts})."
            ) from None

    async def _error_from(self, response: UpstreamResponse, url: str) -> UpstreamError:
        """The upstream's error, from the first 64 KB of its body (the rest is never read)."""
        try:
            capped = read_capped(response, _MAX_ERROR_BODY)
            body, _ = await asyncio.wait_for(capped, self._target.connect_timeout)
        except (TimeoutError, UpstreamError):
            body = b""
        finally:
            await response.aclose()
        return classify(response.status, body, response.headers, url, upstream=self._target.name)

    async def events(self) -> AsyncGenerator[list[Event], None]:
        """Batches of events, first `response.created`; the last batch holds the terminal event.
        Cancelling the iteration (client gone) closes the upstream request."""
        translator = self.translator
        response = self._response
        assert response is not None, "open() first"
        yield translator.start()
        try:
            async for batch in self._translate(response):
                if len(batch) > 1 and translator.output_chars > _SPLIT_BATCHES_ABOVE:
                    for event in batch:
                        yield [event]
                elif batch:
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
        """Upstream bytes -> event batches. The body is an event stream, or (servers that
        ignore `stream`, and errors sent with a 200) one JSON object: the first byte that is
        not white space tells (an event stream cannot start with `{`; content types lie)."""
        decoder = SSEDecoder()
        chunks = aiter(response.iter_chunks())
        loop = asyncio.get_running_loop()
        whole: list[bytes] | None = None  # the body so far, once it is known to be JSON
        sniffing = True
        whole_size = 0
        whole_cap = 2 * self._target.max_output_bytes + _MAX_ERROR_BODY  # JSON escapes add bytes
        while True:
            events: list[Event] = []
            try:
                try:
                    raw = await self._next_chunk(chunks)
                except StopAsyncIteration:
                    if whole is not None:
                        events.extend(self._whole_body(b"".join(whole), response))
                    else:
                        self._feed(self._decode(decoder, None), events)
                        events.extend(self.translator.finish())
                    yield events
                    return
                if loop.time() > self._deadline:
                    # Checked as bytes arrive, so a stream of keep-alive comments, or one that
                    # never ends, ends here; a silent upstream is ended by the idle timeout.
                    raise UpstreamTimeout(
                        f"The response took longer than its total budget of "
                        f"{self._target.max_request_seconds:g} seconds (max_request_seconds)."
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
                self._feed(self._decode(decoder, raw), events)
                if self.translator.output_chars > self._target.max_output_bytes:
                    events.extend(self.translator.truncate())
                    log.info(
                        "upstream %s: output passed %d bytes (max_output_bytes); response ended incomplete",
                        self._target.name,
                        self._target.max_output_bytes,
                    )
                    yield events
                    return  # not drained: the upstream may never stop; closing cancels it
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

    @staticmethod
    def _decode(decoder: SSEDecoder, raw: bytes | None) -> list[bytes]:
        """Payloads from the next bytes (None: the end). Raises UpstreamResponseTooLarge."""
        try:
            return decoder.feed(raw) if raw is not None else decoder.finish()
        except SSEEventTooLarge as exc:
            raise UpstreamResponseTooLarge(
                f"The upstream sent an event-stream line or event larger than {exc.limit} bytes."
            ) from None

    def _whole_body(self, raw: bytes, response: UpstreamResponse) -> list[Event]:
        """A 200 answer that is one JSON object: a `chat.completion` (the server ignored
        `stream`), translated like a stream, or an error, classified with its own message."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise UpstreamStreamCut(
                "The upstream's JSON answer ended before it was complete, or is not JSON."
            ) from None
        if isinstance(data, dict) and isinstance(data.get("choices"), list):
            return self.translator.feed(data) + self.translator.end_of_stream_marker()
        if isinstance(data, dict) and data.get("error"):
            raise classify(0, data, response.headers)
        raise UpstreamError(
            "The upstream answered with JSON that is neither a chat completion nor an error: "
            f"{clip(raw, 200)}."
        )

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
                # (then finish() reports the cut). Counted; logged once per response.
                translator.count_malformed()
                if not self._noise_logged:
                    self._noise_logged = True
                    name = self._target.name
                    log.warning("upstream %s sent data that is not JSON: %s", name, clip(data, 200))
                continue
            events.extend(translator.feed(chunk))

    async def _next_chunk(self, chunks: AsyncIterator[bytes]) -> bytes:
        """The next upstream bytes. Only this wait counts as upstream idleness: time the client
        takes to read what was already sent does not. Raises StopAsyncIteration at EOF."""
        watchdog = self._watchdog
        if watchdog is None:
            watchdog = self._watchdog = _IdleWatchdog(
                self._target.idle_timeout, self._first_byte_deadline, self._started
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
            log.info("upstream %s: %s", self._target.name, exc.message)
            raise UpstreamStreamCut("The upstream connection broke before the model finished.") from None
        except BaseException:
            watchdog.end()
            raise
        watchdog.arrived()
        return data

    async def _drain(self, chunks: AsyncIterator[bytes]) -> None:
        """Read what follows the terminal event ([DONE]) so the connection can be reused."""
        try:
            async with asyncio.timeout(_DRAIN_SECONDS):
                async for _ in chunks:
                    pass
        except (TimeoutError, UpstreamError):
            pass


class ChatBackend:  # a backends.base.Backend
    """An upstream as one model route sees it (its dialect includes the route's overrides).
    Routes of one upstream share `counts` (repairs and checks tallied) and `windows`."""

    def __init__(
        self,
        target: UpstreamTarget,
        transport: Transport,
        once: OnceLog | None = None,
        counts: Counter[str] | None = None,
        windows: ContextWindows | None = None,
        history: Memo[Checkpoint] | None = None,
    ) -> None:
        """`history`: where each conversation's last translated input is remembered between
        turns (translate/request.py Checkpoint); routes may share one, the keys are apart."""
        self.target = target
        self.transport = transport
        self.once = once or OnceLog()
        self.counts: Counter[str] = Counter() if counts is None else counts
        if windows is None and target.learn_context_window:
            probe_timeout = min(target.connect_timeout, 5.0)
            windows = ContextWindows(
                transport, target.base_url, target.headers, probe_timeout, target.name, target.models
            )
        self.windows = windows
        self.history = history
        self._listing: ModelList | None = None
        self._listing_until = 0.0

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def base_url(self) -> str:
        return self.target.base_url

    async def model_ids(self) -> list[str]:
        """The upstream's model list (for a pass-through upstream); [] when it cannot tell."""
        target = self.target
        if target.models:
            return list(target.models)
        url = target.base_url.rstrip("/") + "/models"
        status, body = await fetch_json(self.transport, url, target.headers, target.connect_timeout)
        return [m["id"] for m in model_entries(body)] if status == 200 else []

    async def reachability(self) -> ModelList:
        """The upstream's answer to `GET /models`, asked at most every few seconds (for
        /healthz, which monitors may poll often)."""
        now = time.monotonic()
        if self._listing is None or now >= self._listing_until:
            target = self.target
            timeout = min(target.connect_timeout, _HEALTH_PROBE_SECONDS)
            self._listing = await list_models(self.transport, target.base_url, target.headers, timeout)
            self._listing_until = time.monotonic() + _HEALTH_CACHE_SECONDS
        return self._listing

    def call(self, req: ResponsesRequest, upstream_model: str) -> ChatCall:
        """Raises InvalidRequest for input the upstream could not read. (A dialect naming an
        unknown text tool-call format, which settings refuse, raises ValueError in open().)"""
        return ChatCall(self, req, upstream_model)
