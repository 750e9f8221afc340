"""One model turn, from whatever a backend reads to canonical Responses events. Pure feeding,
plus the run loop that makes the terminal event a guarantee.

Every backend writes into a `Turn` in neutral terms, whatever its upstream speaks: answer text,
reasoning, a tool call opened / its arguments / closed, an item passed through as it is, usage,
the end (or a failure). The turn runs those parts through the stages (translate/stages.py:
think tags, tool calls written as text, the loop guard, stop sequences, argument repair, the
grammar check, the usage estimate), hands the result to the `ResponseBuilder`, and mints the
response id.

Tool calls are held until the model's turn ends: a client runs a call as soon as it sees it
done, so a call cut off mid-arguments (or followed by a failure) must never reach it; the
stages that repair arguments and check grammars need them whole anyway.

`Turn.run(source)` is the loop every backend's `Call.events()` is: the backend's `source` is an
async iterator that reads its upstream and feeds the turn, yielding whenever it fed something;
the loop hands out what the turn made, and ends the stream with exactly one terminal event
whatever the source does (ends early, raises, is cancelled), every open item closed first.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from codexgate.errors import GatewayError, UpstreamStreamCut
from codexgate.translate.builder import IdFactory, ReasoningBlob, ResponseBuilder
from codexgate.translate.catalogue import CUSTOM_INPUT_PARAM, ToolCatalogue
from codexgate.translate.dialect import ThinkMode
from codexgate.translate.envelope import Envelope, estimated_usage
from codexgate.translate.interrupt import Interrupt
from codexgate.translate.stages import (
    Failure,
    Finish,
    Part,
    Pipeline,
    Reasoning,
    Stop,
    Text,
    TextCall,
    ToolCall,
    build_pipeline,
)
from codexgate.wire.responses import ResponsesRequest
from codexgate.wire.responses_events import Event

__all__ = ["Turn", "TurnOptions", "custom_input_from_arguments", "new_id"]

log = logging.getLogger("codexgate.turn")

# How a backend says its model's turn ended (Chat Completions' words): `stop` and `tool_calls`
# complete the response, the others end it incomplete.
_INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}
# Past this much output, each event of a batch goes out on its own, so the deliverer encodes
# one `done` event (each holds the whole text) at a time instead of all four at once.
_SPLIT_BATCHES_ABOVE = 1024 * 1024


def new_id(prefix: str) -> str:
    """An id for a response or item (`resp_...`, `msg_...`): 128 random bits as 32 hex digits
    (a uuid4's shape; building a UUID object for it cost five times as much)."""
    return f"{prefix}_{os.urandom(16).hex()}"


def _wall_clock() -> int:
    return int(time.time())


def custom_input_from_arguments(arguments: str) -> str:
    """The raw input of a custom tool a model called as a function: `{"input": "..."}`, or an
    object with a single string field, or the arguments text itself."""
    try:
        data = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(data, dict):
        value = data.get(CUSTOM_INPUT_PARAM)
        if isinstance(value, str):
            return value
        strings = [v for v in data.values() if isinstance(v, str)]
        if len(data) == 1 and strings:
            return strings[0]
    if isinstance(data, str):
        return data
    return arguments


@dataclass(frozen=True, slots=True)
class TurnOptions:
    """What a backend asks of the turn: its stages, and the policies of its dialect."""

    think_tags: ThinkMode = "off"
    text_tool_calls: str = "off"
    loop_guard: bool = False
    # Stop sequences the gateway applies (None: the upstream applies the request's own).
    stop: list[str] | None = None
    input_token_estimate: int = 0
    # Output characters (text, reasoning, tool arguments) past which the response ends
    # `incomplete` (max_output_tokens) and the upstream is no longer read.
    max_output_chars: int | None = None
    reasoning_blob: ReasoningBlob | None = None  # see ResponseBuilder
    mark_cuts: bool = False  # see ResponseBuilder and translate/cuts.py
    label: str = ""  # who is answering, for log lines (the upstream's name)
    # The server's way to end this stream early (it is stopping): translate/interrupt.py.
    interrupt: Interrupt | None = None


@dataclass(slots=True)
class _OpenCall:
    """A tool call as it accumulates, from its first fragment to the end of the turn."""

    name: str  # as the model was shown it, or the client's own name with `namespace`
    namespace: str | None
    call_id: str | None
    args: list[str] = field(default_factory=list)
    raw_input: bool = False  # a custom call's raw input, not `{"input": ...}` arguments
    checked: bool = False  # recognised in text: arguments already validated


class Turn:
    """The canonical events of one response, fed by one backend. Feeding methods never raise:
    a stage that stops the response (the loop guard) leaves its error in `failure`, which
    `run` (or the caller) turns into `response.failed`."""

    def __init__(
        self,
        req: ResponsesRequest,
        catalogue: ToolCatalogue,
        options: TurnOptions = TurnOptions(),
        *,
        counts: Counter[str] | None = None,
        new_id: IdFactory = new_id,
        now: Callable[[], int] = _wall_clock,
        sent: Mapping[str, Any] | None = None,
        response_id: str | None = None,
    ) -> None:
        """`sent`: the upstream request body when its sampling values should be echoed
        instead of the client's (see Envelope). `response_id`: given by a caller that must
        know it before the turn starts; otherwise minted here."""
        self.response_id = response_id or new_id("resp")
        envelope = Envelope.for_request(
            req, self.response_id, now(), sent=sent, unavailable_tools=catalogue.unavailable
        )
        self._builder = ResponseBuilder(
            envelope, new_id, now, reasoning_blob=options.reasoning_blob, mark_cuts=options.mark_cuts
        )
        self._catalogue = catalogue
        self._options = options
        self._stages: Pipeline = build_pipeline(
            catalogue,
            think_tags=options.think_tags,
            text_tool_calls=options.text_tool_calls,
            loop_guard=options.loop_guard,
            stop=options.stop,
            counts=counts,
            input_token_estimate=options.input_token_estimate,
        )
        self._calls: dict[object, _OpenCall] = {}  # by the backend's key, in the order opened
        self._usage: dict[str, Any] | None = None
        self._stopped = False  # a stop sequence ended the answer
        self._stop_sequence: str | None = None  # which, when known (the terminal event carries it)
        self._natural_end = False  # the backend said the model finished (then `run` drains it)
        self.output_chars = 0
        self.failure: GatewayError | None = None

    # -- state

    @property
    def done(self) -> bool:
        """A terminal event was made."""
        return self._builder.done

    @property
    def output(self) -> list[dict[str, Any]]:
        """The response's items finished so far (all of them once it ended)."""
        return self._builder.output

    @property
    def has_calls(self) -> bool:
        return bool(self._calls)

    def start(self) -> list[Event]:
        """`response.created` and `response.in_progress`."""
        return self._builder.start()

    def take(self) -> list[Event]:
        """The events made since the last call."""
        return self._builder.take()

    # -- feeding (the backend's side)

    def text(self, text: str) -> None:
        """Answer text."""
        self._text_from(0, text)

    def texts(self, texts: list[str]) -> None:
        """`text` for each of a run of answer deltas (an upstream's read of many chunks), in
        order, giving the same events: the deltas every stage passes on unchanged go to the
        builder in one call. Stops at a failure or a stop, as the deltas after them would not
        be fed."""
        self._texts_from(0, texts)

    def _texts_from(self, position: int, texts: list[str]) -> None:
        """`texts`, which the stages before `position` passed on unchanged, from there on."""
        stages = self._stages
        while texts and not self._stopped:
            passed, taken, rest = stages.take_texts(texts, position)
            if passed:
                self.output_chars += sum(map(len, texts[:passed]))
                self._builder.texts(texts, passed)
            for later, start, end in rest:
                self._texts_from(later, texts[start:end])
                if self._stopped or self.failure is not None:
                    return
            if taken == len(texts):
                return
            self._text_from(position, texts[taken])
            if self.failure is not None:
                return
            texts = texts[taken + 1 :]

    def _text_from(self, position: int, text: str) -> None:
        """`text(text)` for a delta the stages before `position` passed on unchanged."""
        if self._stopped:
            return
        parts = self._stages.feed_text_from(position, text)
        if parts is None:  # the common delta: plain text, unchanged by every stage
            self.output_chars += len(text)
            self._builder.text(text)
        else:
            self._emit(parts)
            if self._stopped:
                self._stop_now()

    def reasoning(self, text: str) -> None:
        """Reasoning text (a summary or the model's raw thinking)."""
        parts = self._stages.feed_reasoning(text)
        if parts is None:
            self.output_chars += len(text)
            self._builder.reasoning(text)
        else:
            self._emit(parts)

    def refusal(self, text: str) -> None:
        """The model's own words in a field no stage parses: watched and counted, never read for
        tags or calls."""
        if self._stopped:
            return
        self._emit(self._stages.feed(Text(text, verbatim=True)))
        if self._stopped:
            self._stop_now()

    def close_reasoning(self, encrypted_content: str | None) -> None:
        """The reasoning item ends here, with the upstream's own `encrypted_content` (with
        none open, a blob makes an item of its own: see ResponseBuilder.close_reasoning)."""
        if not self.done:
            self._builder.close_reasoning(encrypted_content)

    def open_call(
        self,
        key: object,
        name: str,
        call_id: str | None = None,
        *,
        namespace: str | None = None,
        raw_input: bool = False,
    ) -> None:
        """A structured tool call starts. `name` is the name the model was shown (flat), or,
        with `namespace`, the client's own; `raw_input`: its arguments are a custom tool's raw
        input rather than JSON. `key` is the backend's handle for the later parts."""
        if self._stopped:
            return
        self._emit(self._stages.flush())  # the text before a structured call is complete
        if self._stopped:
            self._stop_now()
            return
        self._builder.close_text()
        self._calls[key] = _OpenCall(name, namespace, call_id, raw_input=raw_input)

    def call_name(self, key: object, more: str) -> None:
        """More of a call's name (some chat servers split it until the arguments start)."""
        call = self._calls.get(key)
        if call is not None:
            call.name += more

    def call_id(self, key: object, call_id: str) -> None:
        """A call's id, when it arrives after the call opened."""
        call = self._calls.get(key)
        if call is not None and call.call_id is None:
            call.call_id = call_id

    def call_arguments(self, key: object, delta: str) -> None:
        """More of a call's arguments (or raw input)."""
        call = self._calls.get(key)
        if call is not None and delta:
            call.args.append(delta)
            self.output_chars += len(delta)

    def item(self, item: dict[str, Any]) -> None:
        """An output item with no parts of its own, passed through as it is."""
        self._emit(self._stages.flush())
        self._builder.item(item)

    def usage(self, usage: dict[str, Any]) -> None:
        """The upstream's token counts, Responses-shaped (the last given wins)."""
        self._usage = usage

    def finish(self, reason: str | None = "stop", stop_sequence: str | None = None) -> None:
        """The model's turn ended: `stop` or `tool_calls` complete the response; `length` and
        `content_filter` end it incomplete (its calls are dropped: they may be cut off).
        `stop_sequence`: the request's stop sequence the upstream says it met (vLLM's
        `stop_reason`, Anthropic's `stop_sequence`), for the Messages face to answer with."""
        if self.done:
            return
        self._natural_end = True
        if stop_sequence is not None:
            self._stop_sequence = stop_sequence
        self._end(reason)

    def truncate(self) -> None:
        """End now as `response.incomplete` (max_output_tokens): the gateway's output cap."""
        if not self.done:
            self._end("length")

    def fail(self, error: GatewayError) -> list[Event]:
        """Close every open item, mark what was said as cut when asked (translate/cuts.py) and
        end with `response.failed`; the events made since the last `take()` come first. A failed
        turn runs no tool: its calls may be cut mid-arguments, and they were never announced."""
        if self.done:
            return self._builder.take()
        self._calls.clear()
        try:
            self._emit(self._stages.flush())
            usage = self._usage
            self._emit(self._stages.feed(Finish(usage, self.output_chars, error=error)))
        except Exception:
            pass  # closing must never cost the terminal event
        if not self.done:
            usage = self._usage or estimated_usage(self._options.input_token_estimate, self.output_chars)
            self._builder.fail(error, usage)
        return self._builder.take()

    # -- the run loop

    async def run(
        self, source: AsyncIterator[object], on_end: Callable[[], Awaitable[None]] | None = None
    ) -> AsyncGenerator[list[Event], None]:
        """Batches of events, first `response.created`, the last holding the one terminal event.

        `source` feeds this turn and yields each time it did. A GatewayError it raises becomes
        `response.failed` (what it fed before still goes out first); a bug too, as an internal
        error; a source that ends before the backend said the model finished is a cut. Once the
        terminal batch is out, a source whose model finished is read to its end (a backend may
        drain its connection); one the gateway stopped (a failure, the output cap, a stop
        sequence) is closed, which cancels its upstream request. Closing this generator (the
        client left) closes the source. `on_end` is awaited last, however the run ended, even
        if the source never started: a backend's cleanup belongs there, not in the source."""
        interrupt = self._options.interrupt
        try:
            yield self.start()
            try:
                while True:
                    if interrupt is not None:
                        if interrupt.error is not None:
                            raise interrupt.error
                        interrupt.waiting = True  # only a wait on the source may be cut short
                    try:
                        await anext(source)
                    except StopAsyncIteration:
                        break
                    finally:
                        if interrupt is not None:
                            interrupt.waiting = False
                    events = self._next_batch()
                    if len(events) > 1 and self.output_chars > _SPLIT_BATCHES_ABOVE:
                        for event in events:
                            yield [event]
                    elif events:
                        yield events
                    del events  # sent: not held while the source is awaited
                    if self.done:
                        break
                if not self.done:
                    raise UpstreamStreamCut("The upstream stopped before the model finished.")
            except (GatewayError, asyncio.CancelledError, Exception) as exc:
                yield self._last_batch(exc)
            else:
                if self._natural_end:
                    await _drain(source)
        finally:
            try:
                aclose = getattr(source, "aclose", None)
                if aclose is not None:
                    await aclose()
            finally:
                if on_end is not None:
                    await on_end()

    def _next_batch(self) -> list[Event]:
        """What the source's last feed made. Raises the failure a stage left (the loop guard);
        past the output cap the response ends `incomplete` first."""
        if self.failure is not None:
            raise self.failure
        cap = self._options.max_output_chars
        if cap is not None and self.output_chars > cap and not self.done:
            log.info("%s: output passed %d characters; response ended incomplete",
                     self._options.label or "upstream", cap)  # fmt: skip
            self.truncate()
        return self._builder.take()

    def _last_batch(self, exc: BaseException) -> list[Event]:
        """The terminal batch for a run that ended with `exc`. Raises the CancelledError again
        when the cancellation is not the interrupt's (the client left, or the server gave up:
        no event can go out)."""
        if isinstance(exc, GatewayError):
            return self.fail(exc)
        if isinstance(exc, asyncio.CancelledError):
            interrupt = self._options.interrupt
            error = interrupt.claim() if interrupt is not None else None
            if error is None:
                raise exc
            return self.fail(error)
        # A bug must still end the stream well-formed.
        log.error("unexpected error while streaming", exc_info=exc)
        return self.fail(GatewayError(f"internal gateway error: {type(exc).__name__}"))

    # -- parts -> the builder

    def _emit(self, parts: list[Part]) -> None:
        builder = self._builder
        for part in parts:
            kind = type(part)
            if kind is Text:
                self.output_chars += len(part.text)  # type: ignore[union-attr]
                builder.text(part.text)  # type: ignore[union-attr]
            elif kind is Reasoning:
                self.output_chars += len(part.text)  # type: ignore[union-attr]
                builder.reasoning(part.text)  # type: ignore[union-attr]
            elif isinstance(part, TextCall):
                builder.close_text()
                key = ("text", len(self._calls))  # apart from every backend's own keys
                self._calls[key] = _OpenCall(part.name, None, None, [part.arguments], checked=True)
            elif isinstance(part, ToolCall):
                self._send_call(part)
            elif isinstance(part, Failure):
                if self.failure is None:
                    self.failure = part.error
            elif isinstance(part, Stop):
                self._stopped = True
                self._stop_sequence = part.sequence
            elif isinstance(part, Finish):
                usage = part.usage or {}
                if part.error is not None:
                    builder.fail(part.error, usage)
                else:
                    builder.finish(usage, part.incomplete_reason, stop_sequence=self._stop_sequence)

    def _send_call(self, call: ToolCall) -> None:
        spec, builder = call.spec, self._builder
        if spec.kind == "custom":
            builder.custom_tool_call(
                spec.name, call.arguments, call_id=call.call_id, namespace=spec.namespace
            )
        elif spec.kind == "function":
            # a call without arguments still happened
            builder.function_call(
                spec.name, call.arguments or "{}", call_id=call.call_id, namespace=spec.namespace
            )
        else:
            builder.client_call(spec.kind, call.arguments, call_id=call.call_id)

    def _stop_now(self) -> None:
        """A stop sequence ended the answer: the response completes here; calls still open
        may be cut off, so they are dropped, and the upstream is no longer read."""
        if not self.done:
            self._calls.clear()
            self._end("stop")

    def _end(self, reason: str | None) -> None:
        """The closing events and the terminal one, into the builder. If anything here raises,
        `fail()` still makes the terminal event."""
        stages = self._stages
        self._emit(stages.flush())
        incomplete = _INCOMPLETE_REASONS.get(reason or "")
        if incomplete:
            self._calls.clear()  # a truncated turn runs no tool: its calls may be cut mid-arguments
        catalogue = self._catalogue
        for call in self._calls.values():
            if call.namespace is not None:
                spec = catalogue.find(call.namespace, call.name)
            else:
                spec = catalogue.resolve(call.name)
            arguments = "".join(call.args)
            if spec.kind == "custom" and not call.raw_input:
                arguments = custom_input_from_arguments(arguments)
            self._emit(stages.feed(ToolCall(spec, arguments, call.call_id, call.checked)))
        self._calls.clear()
        self._emit(stages.feed(Finish(self._usage, self.output_chars, incomplete)))


async def _drain(source: AsyncIterator[object]) -> None:
    """Read a finished model's source to its end (a backend may drain its connection): nothing
    more goes out after the terminal event, so nothing of it can be reported."""
    try:
        async for _ in source:
            pass
    except Exception:
        log.debug("error after the end of the response", exc_info=True)
