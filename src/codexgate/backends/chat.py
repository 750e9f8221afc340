"""The Chat Completions backend: canonical request in, canonical event stream out.

The request is translated to a chat body (translate/request.py), sent with the shared HTTP
plumbing (backends/http_stream.py: budgets, retries, errors), and the answer's chunks are read
by the chat dialect's translator (translate/stream.py) into the turn (translate/turn.py), whose
run loop is `events()`. What only a chat upstream needs is here: the context-window check before
sending, the conversation memory that translates a re-sent history once, and the turn's chat
policies (the gateway's reasoning blob, cut markers).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator

import orjson

from codexgate.backends.base import UNKNOWN, Inbound
from codexgate.backends.http_stream import DONE, HttpStream, UpstreamTarget, WholeBody, describe_json
from codexgate.backends.log import OnceLog, clip, log
from codexgate.backends.model_list import ModelList, list_models
from codexgate.backends.server_info import ContextWindows, fetch_json, model_entries
from codexgate.backends.transport import Transport
from codexgate.errors import ContextLengthExceeded, UpstreamError, UpstreamStreamCut
from codexgate.memo import Memo
from codexgate.translate.reasoning import encode_reasoning
from codexgate.translate.request import ChatRequest, Checkpoint, to_chat_request
from codexgate.translate.stream import ChatStreamTranslator
from codexgate.translate.turn import Turn, TurnOptions
from codexgate.translate.upstream_errors import classify
from codexgate.wire.responses import ResponsesRequest
from codexgate.wire.responses_events import Event

__all__ = ["ChatBackend", "ChatCall", "OnceLog", "UpstreamTarget"]

_MAX_BYTES_PER_TOKEN = 6
_HEALTH_PROBE_SECONDS = 2.0
_HEALTH_CACHE_SECONDS = 5.0
_LOGGED_KINDS = 8  # dropped tool kinds or item types logged per request


class ChatCall:
    """One request to a chat upstream, from `open()` to the last event."""

    def __init__(
        self, backend: ChatBackend, req: ResponsesRequest, upstream_model: str, inbound: Inbound
    ) -> None:
        self._backend = backend
        self._target = backend.target
        dialect = self._target.dialect
        history = backend.history
        key = (backend, inbound.conversation)
        earlier = history.get(key) if history is not None and inbound.conversation else None
        chat = to_chat_request(req, dialect, upstream_model, earlier, inbound.known_prefix)
        self._upstream_model = upstream_model
        # Client-chosen strings: clipped, and a few per request at most.
        for kind in dict.fromkeys(chat.catalogue.skipped[:_LOGGED_KINDS]):
            backend.once.warning(f"tool kind {clip(kind)} cannot run on a chat upstream; left out")
        for kind in dict.fromkeys(chat.dropped_items[:_LOGGED_KINDS]):
            backend.once.warning(f"input item type {clip(kind)} has no chat form; left out")
        body = chat.encode()
        self._input_bytes = len(body)
        if history is not None and inbound.conversation:
            history.put(key, chat.checkpoint, inbound.body_size or len(body))
        self._http = HttpStream(backend.transport, self._target, "/chat/completions", body)
        # The turn is made once the request is out (open()): until the upstream's first byte,
        # the gateway has time to spare; before sending, every microsecond adds to the time to
        # first token.
        self._unsent: tuple[ResponsesRequest, ChatRequest] | None = (req, chat)
        self._translator: ChatStreamTranslator | None = None
        self._noise_logged = False

    @property
    def translator(self) -> ChatStreamTranslator:
        """The chunk translator, and through it the turn; made by open()."""
        assert self._translator is not None, "open() first"
        return self._translator

    def _make_turn(self) -> None:
        assert self._unsent is not None
        req, chat = self._unsent
        self._unsent = None
        backend, target = self._backend, self._target
        dialect = target.dialect
        options = TurnOptions(
            think_tags=dialect.think_tags,
            text_tool_calls=dialect.text_tool_calls,
            loop_guard=dialect.loop_guard,
            input_token_estimate=self._input_bytes // 4,
            max_output_chars=target.max_output_bytes,
            # Chat policies: the reasoning text rides in the item's encrypted_content and is
            # replayed upstream next turn; a failed answer is marked so the next request
            # leaves it out (translate/cuts.py).
            reasoning_blob=encode_reasoning,
            mark_cuts=True,
            label=f"upstream {target.name}",
        )
        turn = Turn(req, chat.catalogue, options, counts=backend.counts, sent=chat.body)
        self._translator = ChatStreamTranslator(turn, backend.counts)

    def _check_fits(self, window: int | None) -> None:
        """Refuse a request that cannot fit the model's window. The bound is deliberately low
        (6 bytes a token; tokenizers average 3-4.5 on code and prose, JSON escaping only adds
        bytes), so only requests that clearly overflow are refused; the rest is the upstream's
        call."""
        lower_bound = self._input_bytes // _MAX_BYTES_PER_TOKEN
        if window and lower_bound > window:
            raise ContextLengthExceeded(
                f"This request needs at least {lower_bound} tokens, more than the model's context window "
                f"of {window} tokens. Compact or shorten the conversation."
            )

    async def open(self) -> None:
        """Send the request. Raises GatewayError (already classified) if the upstream refuses."""
        target = self._target
        self._http.start_clock()  # the window probe below counts against the request's budget
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
        await self._http.open()
        try:
            self._make_turn()
        except BaseException:
            await self._http.aclose()  # no stream will read it
            raise

    def events(self) -> AsyncGenerator[list[Event], None]:
        """The turn's run loop over this upstream's answer (see Call.events)."""
        return self.translator.turn.run(self._read(), self._http.aclose)

    async def _read(self) -> AsyncIterator[None]:
        """Feed the turn from the answer, yielding after each read; drain after the end."""
        translator = self.translator
        http = self._http
        answer = http.payloads()
        try:
            async for payloads in answer:
                if isinstance(payloads, WholeBody):
                    self._whole_body(payloads.body)
                else:
                    self._feed(payloads)
                yield None
                if translator.done:
                    await http.drain()
                    return
            translator.finish()  # the end of the body: finished, or cut
            yield None
        finally:
            await answer.aclose()

    def _whole_body(self, raw: bytes) -> None:
        """A 200 answer that is one JSON object: a `chat.completion` (the server ignored
        `stream`), translated like a stream, or an error, classified with its own message."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise UpstreamStreamCut(
                "The upstream's JSON answer ended before it was complete, or is not JSON."
            ) from None
        if isinstance(data, dict) and isinstance(data.get("choices"), list):
            self.translator.feed(data)
            self.translator.end_of_stream_marker()
            return
        if isinstance(data, dict) and data.get("error"):
            raise classify(0, data, self._http.headers)
        raise UpstreamError(
            "The upstream answered with JSON that is neither a chat completion nor an error: "
            f"{describe_json(raw)}."
        )

    def _feed(self, payloads: list[bytes]) -> None:
        """Translate decoded SSE payloads into the turn."""
        translator = self.translator
        for data in payloads:
            if data == DONE:
                translator.end_of_stream_marker()
                return
            try:
                chunk = orjson.loads(data)
            except orjson.JSONDecodeError:
                # Not JSON: noise, or the fragment of an event cut by a dropped connection
                # (then finish() reports the cut). Counted; logged once per response.
                translator.count_malformed()
                if not self._noise_logged:
                    self._noise_logged = True
                    log.warning(
                        "upstream %s sent data that is not JSON: %s", self._target.name, clip(data, 200)
                    )
                continue
            translator.feed(chunk)
            if translator.done:
                return


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

    async def aclose(self) -> None:
        """Nothing to release: the transport is the app's."""

    def call(self, req: ResponsesRequest, upstream_model: str, inbound: Inbound = UNKNOWN) -> ChatCall:
        """Raises InvalidRequest for input the upstream could not read. (A dialect naming an
        unknown text tool-call format, which settings refuse, raises ValueError in open().)"""
        return ChatCall(self, req, upstream_model, inbound)
