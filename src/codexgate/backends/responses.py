"""The Responses backend: any Responses server (OpenAI, vLLM, Ollama, LM Studio, another
codexgate) as the upstream.

The canonical request is repaired into what such servers take (translate/responses_upstream.py),
sent with the shared HTTP plumbing (backends/http_stream.py: budgets, retries before the first
byte, errors), and the upstream's events are read into the turn (translate/responses_stream.py),
whose run loop is `events()`. The turn gets the dialect's stages as for a chat upstream: an
open model served through `/v1/responses` still writes think tags and tool calls as text.

What this backend does not do: learn context windows (`windows` is None) or remember
conversations between turns; the request is translated whole each time.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator

import orjson

from codexgate.backends.base import UNKNOWN, ContextWindowsView, Inbound
from codexgate.backends.http_stream import DONE, HttpStream, UpstreamTarget, WholeBody, describe_json
from codexgate.backends.log import OnceLog, clip, log
from codexgate.backends.model_list import ModelList, list_models
from codexgate.backends.server_info import fetch_json, model_entries
from codexgate.backends.transport import Transport
from codexgate.errors import UpstreamError, UpstreamStreamCut
from codexgate.translate.responses_stream import ResponsesStreamReader
from codexgate.translate.responses_upstream import ToolFormat, UpstreamRequest, to_upstream_request
from codexgate.translate.turn import Turn, TurnOptions
from codexgate.translate.upstream_errors import classify
from codexgate.wire.responses import ResponsesRequest
from codexgate.wire.responses_events import Event

__all__ = ["ResponsesBackend", "ResponsesCall"]

_HEALTH_PROBE_SECONDS = 2.0
_HEALTH_CACHE_SECONDS = 5.0
_LOGGED_KINDS = 8  # dropped tool kinds or item types logged per request
_TERMINAL = frozenset(("response.completed", "response.incomplete", "response.failed"))


class ResponsesCall:
    """One request to a Responses upstream, from `open()` to the last event."""

    def __init__(
        self, backend: ResponsesBackend, req: ResponsesRequest, upstream_model: str, inbound: Inbound
    ) -> None:
        """Raises InvalidRequest for what the upstream could not be sent (nothing is sent)."""
        self._backend = backend
        target = self._target = backend.target
        translated = to_upstream_request(
            req,
            upstream_model,
            upstream=target.name,
            tool_format=backend.tool_format,
            extra_body=target.dialect.extra_body,
        )
        # Client-chosen strings: clipped, and a few per request at most.
        for kind in dict.fromkeys(translated.catalogue.skipped[:_LOGGED_KINDS]):
            backend.once.warning(f"tool kind {clip(kind)} is not offered to upstream {target.name}; left out")
        for kind in translated.dropped_items:  # foreign reasoning: routine after a switch of upstream
            backend.counts[f"request.{kind}_left_out"] += 1
        body = translated.encode()
        self._input_bytes = len(body)
        self._http = HttpStream(backend.transport, target, "/responses", body)
        # The turn is made once the request is out (open()), as the chat backend does: until
        # the upstream's first byte the gateway has time to spare.
        self._unsent: tuple[ResponsesRequest, UpstreamRequest] | None = (req, translated)
        self._reader: ResponsesStreamReader | None = None
        self._noise_logged = False

    @property
    def reader(self) -> ResponsesStreamReader:
        """The event reader, and through it the turn; made by open()."""
        assert self._reader is not None, "open() first"
        return self._reader

    def _make_turn(self) -> None:
        assert self._unsent is not None
        req, translated = self._unsent
        self._unsent = None
        backend, target = self._backend, self._target
        dialect = target.dialect
        options = TurnOptions(
            think_tags=dialect.think_tags,
            text_tool_calls=dialect.text_tool_calls,
            loop_guard=dialect.loop_guard,
            stop=req.stop,  # Responses servers have no stop sequences: the gateway applies them
            input_token_estimate=self._input_bytes // 4,
            max_output_chars=target.max_output_bytes,
            # The upstream's reasoning blob is its own (the reader wraps it); a failed answer
            # is marked so the next request leaves it out (translate/cuts.py).
            mark_cuts=True,
            label=f"upstream {target.name}",
        )
        turn = Turn(req, translated.catalogue, options, counts=backend.counts, sent=translated.body)
        self._reader = ResponsesStreamReader(turn, target.name, backend.counts)

    async def open(self) -> None:
        """Send the request. Raises GatewayError (already classified) if the upstream refuses."""
        await self._http.open()
        try:
            self._make_turn()
        except BaseException:
            await self._http.aclose()  # no stream will read it
            raise

    def events(self) -> AsyncGenerator[list[Event], None]:
        """The turn's run loop over this upstream's answer (see Call.events)."""
        return self.reader.turn.run(self._read(), self._http.aclose)

    async def _read(self) -> AsyncIterator[None]:
        """Feed the turn from the answer, yielding after each read; drain after the end."""
        reader = self.reader
        http = self._http
        answer = http.payloads()
        try:
            async for payloads in answer:
                if isinstance(payloads, WholeBody):
                    self._whole_body(payloads.body)
                else:
                    self._feed(payloads)
                yield None
                if reader.done:
                    await http.drain()
                    return
            reader.finish()  # the end of the body: finished, or cut
            yield None
        finally:
            await answer.aclose()

    def _whole_body(self, raw: bytes) -> None:
        """A 200 answer that is one JSON object: a response object (the server ignored
        `stream`), read like a stream, or an error, classified with its own message."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise UpstreamStreamCut(
                "The upstream's JSON answer ended before it was complete, or is not JSON."
            ) from None
        event = data if isinstance(data, dict) and data.get("type") in _TERMINAL else None
        if event is not None and isinstance(event.get("response"), dict):
            data = event["response"]  # a terminal event without event-stream framing
        response = isinstance(data, dict) and (data.get("object") == "response" or "output" in data)
        if isinstance(data, dict) and data.get("error") and not response:
            raise classify(0, data, self._http.headers)
        if response:
            self.reader.feed_response(data)
            return
        raise UpstreamError(
            f"The upstream answered with JSON that is neither a response nor an error: {describe_json(raw)}."
        )

    def _feed(self, payloads: list[bytes]) -> None:
        """Decoded SSE payloads into the turn."""
        reader = self.reader
        for data in payloads:
            if data == DONE:
                continue  # some servers end with it; the terminal event is what counts
            try:
                event = orjson.loads(data)
            except orjson.JSONDecodeError:
                # Not JSON: noise, or the fragment of an event cut by a dropped connection
                # (then finish() reports the cut). Counted; logged once per response.
                reader.count_malformed()
                if not self._noise_logged:
                    self._noise_logged = True
                    log.warning(
                        "upstream %s sent data that is not JSON: %s", self._target.name, clip(data, 200)
                    )
                continue
            reader.feed(event)
            if reader.done:
                return


class ResponsesBackend:  # a backends.base.Backend
    """A Responses upstream as one model route sees it (its dialect includes the route's
    overrides). Routes of one upstream share `counts`."""

    def __init__(
        self,
        target: UpstreamTarget,
        transport: Transport,
        once: OnceLog | None = None,
        counts: Counter[str] | None = None,
        tool_format: ToolFormat = "functions",
    ) -> None:
        """`tool_format`: how tools are offered (config.UpstreamConfig.tool_format)."""
        self.target = target
        self.transport = transport
        self.once = once or OnceLog()
        self.counts: Counter[str] = Counter() if counts is None else counts
        self.tool_format: ToolFormat = tool_format
        self.windows: ContextWindowsView | None = None  # not learned from Responses servers
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
        """The upstream's answer to `GET /models`, asked at most every few seconds."""
        now = time.monotonic()
        if self._listing is None or now >= self._listing_until:
            target = self.target
            timeout = min(target.connect_timeout, _HEALTH_PROBE_SECONDS)
            self._listing = await list_models(self.transport, target.base_url, target.headers, timeout)
            self._listing_until = time.monotonic() + _HEALTH_CACHE_SECONDS
        return self._listing

    async def aclose(self) -> None:
        """Nothing to release: the transport is the app's."""

    def call(self, req: ResponsesRequest, upstream_model: str, inbound: Inbound = UNKNOWN) -> ResponsesCall:
        """Raises InvalidRequest for a field the Responses API cannot carry (`seed`, chat
        sampling fields) or, with `functions`, an item no model could read."""
        return ResponsesCall(self, req, upstream_model, inbound)
