"""What every backend over an HTTP upstream shares: the call (send with backends/http/stream.py,
then read the answer's payloads into the dialect's reader, which feeds the turn) and the
backend (the route's target, the model list, reachability). A dialect (Chat Completions,
Responses) adds the body it sends and the reader of what comes back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any, ClassVar, Protocol

import orjson

from codexgate.backends.base import Inbound, turn_options
from codexgate.backends.http.read_scheduler import REST, read_scheduler
from codexgate.backends.http.stream import DONE, HttpStream, UpstreamTarget, WholeBody, describe_json
from codexgate.backends.http.transport import Body, Transport
from codexgate.backends.log import OnceLog, clip, log
from codexgate.backends.model_list import CachedListing, ModelList, list_models
from codexgate.backends.server_info import fetch_json, model_entries
from codexgate.errors import UpstreamError, UpstreamStreamCut
from codexgate.translate.builder import ReasoningBlob
from codexgate.translate.turn import Turn, TurnOptions
from codexgate.wire.responses_events import Event

__all__ = ["HttpBackend", "HttpCall", "StreamReader"]

_HEALTH_PROBE_SECONDS = 2.0
_HEALTH_CACHE_SECONDS = 5.0
_LOGGED_KINDS = 8  # dropped tool kinds or item types logged per request


class StreamReader(Protocol):
    """A dialect's reader of an upstream's answer into a turn (translate/chat_upstream/stream.py for chat
    chunks, translate/responses_upstream/stream.py for Responses events)."""

    turn: Turn

    @property
    def done(self) -> bool: ...

    def decode(self, payload: bytes) -> Any:
        """One event-stream payload decoded, as `feed` reads it. Raises orjson.JSONDecodeError."""
        ...

    def decode_all(self, payloads: list[bytes]) -> list[Any]:
        """`decode` for each payload in order (those of one read), in one call. Raises
        orjson.JSONDecodeError as `decode` does."""
        ...

    def feed(self, payload: Any) -> None:
        """One decoded event-stream payload. Raises GatewayError for an error in the stream."""
        ...

    def feed_all(self, payloads: list[Any]) -> None:
        """`feed` for each payload in order (those of one read): the same, in fewer calls.
        Raises as `feed` does; the payloads after the one that raised are not fed."""
        ...

    def end_of_stream_marker(self) -> None:
        """The payload `[DONE]`."""
        ...

    def finish(self) -> None:
        """The end of the body. Raises UpstreamStreamCut when the model did not finish."""
        ...

    def count_malformed(self) -> None: ...

    def feed_whole(self, data: Any, headers: Mapping[str, str]) -> bool:
        """A 200 answer that was one JSON value: read it when it is this dialect's whole answer
        (True), raise the error it carries, or say it is neither (False)."""
        ...


class HttpCall:
    """One request to an HTTP upstream, from `open()` to the last event. A dialect's call
    makes the body, then `_make_reader()` once the request is out."""

    answer_noun: ClassVar[str] = "an answer"  # what a whole JSON body should have been

    def __init__(
        self,
        backend: HttpBackend,
        path: str,
        body: Body,
        inbound: Inbound,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """`headers`: this request's own, over the target's."""
        self._target = backend.target
        self._input_bytes = len(body)
        self._counts = backend.counts
        retries = inbound.max_retries
        self._http = HttpStream(
            backend.transport, backend.target, path, body, backend.counts, retries, headers=headers
        )
        self._reader: StreamReader | None = None
        self._noise_logged = False

    @property
    def reader(self) -> StreamReader:
        """The reader, and through it the turn; made by open()."""
        assert self._reader is not None, "open() first"
        return self._reader

    def _make_reader(self) -> StreamReader:
        raise NotImplementedError

    def _turn_options(
        self, *, stop: list[str] | None = None, reasoning_blob: ReasoningBlob | None = None
    ) -> TurnOptions:
        """The turn's options for this upstream (backends/base.turn_options), with the policies
        of every HTTP dialect: its output cap, and a failed answer marked so that the next
        request leaves it out (translate/cuts.py)."""
        target = self._target
        return turn_options(
            target.name,
            target.dialect,
            input_bytes=self._input_bytes,
            max_output_chars=target.max_output_bytes,
            stop=stop,
            reasoning_blob=reasoning_blob,
            mark_cuts=True,
        )

    async def _before_send(self) -> None:
        """What a dialect checks before the request goes (its budgets have started)."""

    async def open(self) -> None:
        """Send the request. Raises GatewayError (already classified) if the upstream refuses.
        The reader (and its turn) is made once the request is out: until the upstream's first
        byte the gateway has time to spare, while before sending every microsecond adds to the
        time to first token."""
        self._http.start_clock()
        await self._before_send()
        await self._http.open()
        try:
            self._reader = self._make_reader()
        except BaseException:
            await self._http.aclose()  # no stream will read it
            raise

    def events(self) -> AsyncGenerator[list[Event], None]:
        """The turn's run loop over this upstream's answer (see Call.events)."""
        return self.reader.turn.run(self._read(), self._http.aclose)

    async def _read(self) -> AsyncIterator[None]:
        """Feed the turn from the answer, yielding after each read; drain after the end."""
        reader = self.reader
        turn = reader.turn
        http = self._http
        answer = http.payloads()
        steady = read_scheduler()
        started = False  # the model's first output went out
        try:
            async for payloads in answer:
                # A started stream takes turns with the others, so that new streams' first
                # tokens do not wait behind their deltas (backends/http/read_scheduler.py).
                if started:
                    wait = steady.wait()
                    if wait is not None:
                        await wait
                if isinstance(payloads, WholeBody):
                    self._whole_body(payloads.body)
                else:
                    self._feed(payloads)
                yield None
                if reader.done:
                    await http.drain()
                    return
                if not started and turn.output_chars:
                    started = True
                    steady.started()
                if started and steady.crowded:
                    await http.rest(REST)  # what comes meanwhile is read, and sent, in one go
            reader.finish()  # the end of the body: finished, or cut
            yield None
        except UpstreamError as exc:  # after the first byte: counted as open() counts those before
            if exc is not reader.turn.failure:  # the gateway's own stop (the loop guard) is not
                self._counts[f"upstream.error.{exc.code}"] += 1
            raise
        finally:
            if started:
                steady.ended()
            await answer.aclose()

    def _feed(self, payloads: list[bytes]) -> None:
        """Decoded event-stream payloads into the reader: each run of JSON payloads in one
        call (`feed_all`), `[DONE]` and data that is not JSON in their places."""
        reader = self.reader
        done = bool(payloads) and payloads[-1] == DONE
        try:  # the common read: JSON payloads, then perhaps [DONE]
            decoded = reader.decode_all(payloads[:-1] if done else payloads)
        except orjson.JSONDecodeError:
            self._feed_each(payloads)
            return
        if decoded:
            reader.feed_all(decoded)
        if done and not reader.done:
            reader.end_of_stream_marker()

    def _feed_each(self, payloads: list[bytes]) -> None:
        """`_feed` for a read with data that is not JSON, or `[DONE]` before its end."""
        reader = self.reader
        decoded: list[Any] = []
        for data in payloads:
            if data != DONE:
                try:
                    decoded.append(reader.decode(data))
                    continue
                except orjson.JSONDecodeError:
                    pass
            if decoded:
                reader.feed_all(decoded)
                decoded = []
                if reader.done:
                    return
            if data == DONE:
                reader.end_of_stream_marker()
            else:
                self._malformed(data)
            if reader.done:
                return
        if decoded:
            reader.feed_all(decoded)

    def _malformed(self, data: bytes) -> None:
        """Not JSON: noise, or the fragment of an event cut by a dropped connection (then
        finish() reports the cut). Counted; logged once per response."""
        self.reader.count_malformed()
        if not self._noise_logged:
            self._noise_logged = True
            log.warning("upstream %s sent data that is not JSON: %s", self._target.name, clip(data, 200))

    def _whole_body(self, raw: bytes) -> None:
        """A 200 answer that is one JSON object (a server that ignored `stream`, an error sent
        with a 200): read by the dialect, or an error naming what it was."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise UpstreamStreamCut(
                "The upstream's JSON answer ended before it was complete, or is not JSON."
            ) from None
        if not self.reader.feed_whole(data, self._http.headers):
            raise UpstreamError(
                f"The upstream answered with JSON that is neither {self.answer_noun} nor an error: "
                f"{describe_json(raw)}."
            )


class HttpBackend:
    """An HTTP upstream as one model route sees it. Routes of one upstream share `counts`
    (repairs and checks tallied)."""

    def __init__(
        self,
        target: UpstreamTarget,
        transport: Transport,
        once: OnceLog | None = None,
        counts: Counter[str] | None = None,
    ) -> None:
        self.target = target
        self.transport = transport
        self.once = once or OnceLog()
        self.counts: Counter[str] = Counter() if counts is None else counts
        self._listing = CachedListing(_HEALTH_CACHE_SECONDS)

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
        target = self.target
        timeout = min(target.connect_timeout, _HEALTH_PROBE_SECONDS)
        return await self._listing.get(
            lambda: list_models(self.transport, target.base_url, target.headers, timeout)
        )

    def warn_left_out(self, what: str, kinds: list[str], why: str) -> None:
        """Say once what of a request the upstream is not sent: a few kinds per request at most,
        each clipped (they are the client's strings)."""
        for kind in dict.fromkeys(kinds[:_LOGGED_KINDS]):
            self.once.warning(f"{what} {clip(kind)} {why}; left out")

    async def aclose(self) -> None:
        """Nothing to release: the transport is the app's."""
