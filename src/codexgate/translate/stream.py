"""Chat Completions stream chunks -> Responses streaming events. Pure and synchronous.

`ChatStreamTranslator` reads decoded chunk objects into semantic parts (answer text, reasoning,
tool calls, the end), runs them through the stages for open models (translate/stages.py) and
hands the result to a `ResponseBuilder` (translate/builder.py), which owns the Responses item
lifecycle. What is left here is the chat dialect: choices and deltas, tool-call fragments, finish
reasons, usage. The same object folds a non-streaming answer, so the two cannot drift apart.
Whatever happens, the stream ends with exactly one of `response.completed`,
`response.incomplete` or `response.failed`, with every open item closed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from codexgate.errors import GatewayError, UpstreamStreamCut
from codexgate.translate.builder import IdFactory, ResponseBuilder
from codexgate.translate.client_calls import CLIENT_CALL_KINDS
from codexgate.translate.content import ContentStage
from codexgate.translate.envelope import Envelope, chat_usage_to_responses, estimated_usage
from codexgate.translate.stages import (
    Failure,
    Finish,
    Part,
    Pipeline,
    Reasoning,
    Text,
    TextCall,
    ToolCall,
    build_pipeline,
)
from codexgate.translate.tools import CUSTOM_INPUT_PARAM, ToolMap
from codexgate.translate.upstream_errors import classify
from codexgate.wire.responses_events import Event

__all__ = ["MALFORMED_CHUNKS", "ChatStreamTranslator", "Event", "IdFactory", "custom_input_from_arguments"]

_INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}
MALFORMED_CHUNKS = "upstream.malformed_chunks"  # counts key: chunks skipped as unreadable


@dataclass(slots=True)
class _ToolCall:
    """A tool call as it accumulates, from its first fragment to the end of the turn."""

    chat_index: int
    call_id: str | None
    name: str = ""
    args: list[str] = field(default_factory=list)
    seq: int = 0  # order of appearance
    from_text: bool = False  # recognised in the content: arguments already checked


def custom_input_from_arguments(arguments: str) -> str:
    """The raw input of a custom tool the model called as a function: `{"input": "..."}`, or
    an object with a single string field, or the arguments text itself."""
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


def _plain_content(chunk: Any) -> str | None:
    """The text of the commonest chunk: one choice (index 0) whose delta is nothing but
    non-empty `content`, with no finish_reason, usage or error beside it. None for any other
    chunk, which `feed`'s general walk reads (it gives the same events for this one)."""
    if type(chunk) is not dict:
        return None
    choices = chunk.get("choices")
    if type(choices) is not list or len(choices) != 1 or chunk.get("usage") or chunk.get("error"):
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("finish_reason") is not None or choice.get("index", 0) != 0:
        return None
    delta = choice.get("delta")
    if type(delta) is not dict or len(delta) != 1:
        return None
    content = delta.get("content")
    return content if type(content) is str and content else None


class ChatStreamTranslator:
    def __init__(
        self,
        envelope: Envelope,
        tool_map: ToolMap,
        new_id: IdFactory,
        *,
        input_token_estimate: int = 0,
        now: Callable[[], int] = lambda: 0,
        content: ContentStage | None = None,
        counts: Counter[str] | None = None,
        loop_guard: bool = False,
        stages: Pipeline | None = None,
    ) -> None:
        """`stages` are the open-model fixes (translate/stages.py); without it they are built
        from `content` (think tags, tool calls written as text), `loop_guard` and
        `input_token_estimate`. `counts` tallies repairs and checks."""
        self._builder = ResponseBuilder(envelope, new_id, now)
        self._tools = tool_map
        self._input_estimate = input_token_estimate
        if stages is None:
            stages = build_pipeline(
                tool_map,
                content=content,
                loop_guard=loop_guard,
                counts=counts,
                input_token_estimate=input_token_estimate,
            )
        self._stages = stages
        self._calls: dict[int, _ToolCall] = {}
        self._call_keys: dict[int, int] = {}  # upstream index -> key in _calls, when they differ
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._output_chars = 0
        self._counts = counts
        self._failure: GatewayError | None = None  # a stage stopped the response
        # Events made by a feed() that then raised: the caller sends them before fail()'s.
        self.pending_events: list[Event] = []

    # -- public API

    @property
    def done(self) -> bool:
        """A terminal event was produced."""
        return self._builder.done

    def start(self) -> list[Event]:
        return self._builder.start()

    def feed(self, chunk: Any) -> list[Event]:
        """One decoded chunk. Raises an UpstreamError for an error object in the stream (and
        ModelOutputLoop when the loop guard stops the model); the events the chunk made before
        it are then in `pending_events`."""
        if self._builder.done:
            return []
        content = _plain_content(chunk)
        if content is not None:  # most chunks: skip the general walk below
            self._text(content)
            if self._failure is not None:
                self.pending_events = self._builder.take()
                raise self._failure
            return self._builder.take()
        if not isinstance(chunk, dict):
            self.count_malformed()
            return []
        choices = chunk.get("choices") or ()
        if not isinstance(choices, list):
            self.count_malformed()  # upstream values are read leniently: skip what has no shape
            choices = ()
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # n > 1 is never requested
            delta = choice.get("delta") or choice.get("message") or {}
            if not isinstance(delta, dict):
                self.count_malformed()
                delta = {}
            if delta:
                self._delta(delta)
                if self._failure is not None:
                    self.pending_events = self._builder.take()
                    raise self._failure
            reason = choice.get("finish_reason")
            if reason == "error" or chunk.get("error"):
                # OpenRouter and others end a failed generation with an error object beside
                # choices and finish_reason "error": a failure, whatever follows.
                self.pending_events = self._builder.take()
                raise classify(
                    0, chunk if chunk.get("error") else {"error": "the upstream reported an error"}
                )
            if isinstance(reason, str) and reason:
                self._finish_reason = reason
        if not choices and chunk.get("error"):
            raise classify(0, chunk)
        usage = chunk.get("usage")
        if isinstance(usage, dict) and usage:
            self._usage = usage
            if self._finish_reason is not None and not choices:
                # The dedicated usage chunk comes last: end now rather than wait for [DONE].
                # (Servers that put running usage on every chunk send that last one too.)
                self._terminal()
        return self._builder.take()

    def count_malformed(self) -> None:
        """An upstream chunk that was skipped because it could not be read."""
        if self._counts is not None:
            self._counts[MALFORMED_CHUNKS] += 1

    @property
    def output_chars(self) -> int:
        """Characters of output so far (text, reasoning, tool-call arguments)."""
        return self._output_chars

    def truncate(self) -> list[Event]:
        """End now as `response.incomplete` (max_output_tokens): the gateway's output cap."""
        if self.done:
            return []
        self._finish_reason = "length"
        self._terminal()
        return self._builder.take()

    def finish(self) -> list[Event]:
        """End of the upstream stream ([DONE] or a clean EOF). Raises UpstreamStreamCut when the
        upstream never said it had finished."""
        if self.done:
            return []
        if self._finish_reason is None:
            raise UpstreamStreamCut(
                "The upstream closed the stream before the model finished (no finish_reason, no [DONE])."
            )
        self._terminal()
        return self._builder.take()

    def end_of_stream_marker(self) -> list[Event]:
        """The upstream sent `[DONE]`: a finished stream even if it never gave a finish_reason."""
        if self._finish_reason is None:
            self._finish_reason = "tool_calls" if self._calls else "stop"
        return self.finish()

    def fail(self, error: GatewayError) -> list[Event]:
        """Close every open item, mark what was said as cut (see translate/cuts.py) and end
        with `response.failed`. A failed turn runs no tool: its calls may be cut
        mid-arguments, and they were never announced."""
        if self.done:
            return []
        self._calls.clear()
        try:
            self._emit(self._stages.flush())
            self._emit(self._stages.feed(Finish(self._responses_usage(), self._output_chars, error=error)))
        except Exception:
            pass  # closing must never cost the terminal event
        if not self.done:
            usage = self._responses_usage() or estimated_usage(self._input_estimate, self._output_chars)
            self._builder.fail(error, usage)
        return self._builder.take()

    def fold(self, body: dict[str, Any]) -> list[Event]:
        """A whole non-streamed `chat.completion` body, as one chunk plus the end."""
        events = self.start()
        events.extend(self.feed(body))
        events.extend(self.end_of_stream_marker())
        return events

    # -- chat deltas -> parts

    def _delta(self, delta: dict[str, Any]) -> None:
        stages = self._stages
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            parts = stages.feed_reasoning(reasoning)
            if parts is None:  # unchanged by every stage (see Pipeline.feed_text)
                self._output_chars += len(reasoning)
                self._builder.reasoning(reasoning)
            else:
                self._emit(parts)
        content = delta.get("content")
        if isinstance(content, str) and content:
            self._text(content)
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self._emit(stages.feed(Text(refusal, verbatim=True)))
        tool_calls = delta.get("tool_calls")
        if tool_calls and isinstance(tool_calls, list):
            for position, call in enumerate(tool_calls):
                if isinstance(call, dict):
                    self._tool_delta(call, position)

    def _text(self, text: str) -> None:
        parts = self._stages.feed_text(text)
        if parts is None:  # the common delta: plain text, unchanged by every stage
            self._output_chars += len(text)
            self._builder.text(text)
        else:
            self._emit(parts)

    def _tool_delta(self, call: dict[str, Any], position: int) -> None:
        """Accumulate a tool call. Calls become items only once the upstream has finished its
        turn (`_send_calls`): the client runs a call as soon as it sees it done, so a call cut
        off mid-arguments must never reach it."""
        index = call.get("index")
        if not isinstance(index, int):
            index = position
        key = self._call_keys.get(index, index)
        state = self._calls.get(key)
        call_id = call.get("id") or None
        if not isinstance(call_id, str):
            call_id = None
        if state is not None and call_id and state.call_id and call_id != state.call_id:
            # A new id on a known index is a new call (Ollama numbers parallel calls all 0).
            key = max(self._calls) + 1
            self._call_keys[index] = key
            state = None
        if state is None:
            self._emit(self._stages.flush())  # the text before a structured call is complete
            self._builder.close_text()
            state = self._calls[key] = _ToolCall(key, call_id, seq=len(self._calls))
        elif call_id and state.call_id is None:
            state.call_id = call_id
        function = call.get("function") or {}
        if not isinstance(function, dict):
            function = {}
        name = function.get("name")
        if isinstance(name, str) and name and not state.args:
            state.name += name  # some servers split the name; it is whole once arguments start
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # some servers send an object instead of a string
            arguments = orjson.dumps(arguments).decode()
        if isinstance(arguments, str) and arguments:
            state.args.append(arguments)
            self._output_chars += len(arguments)

    def _text_call(self, piece: TextCall) -> None:
        self._builder.close_text()
        key = -1 - len(self._calls)  # apart from the upstream's own call indexes
        self._calls[key] = _ToolCall(
            key, None, piece.name, [piece.arguments], seq=len(self._calls), from_text=True
        )

    # -- parts -> the builder

    def _emit(self, parts: list[Part]) -> None:
        builder = self._builder
        for part in parts:
            kind = type(part)
            if kind is Text:
                self._output_chars += len(part.text)  # type: ignore[union-attr]
                builder.text(part.text)  # type: ignore[union-attr]
            elif kind is Reasoning:
                self._output_chars += len(part.text)  # type: ignore[union-attr]
                builder.reasoning(part.text)  # type: ignore[union-attr]
            elif isinstance(part, TextCall):
                self._text_call(part)
            elif isinstance(part, ToolCall):
                if part.custom:
                    builder.custom_tool_call(
                        part.name, part.arguments, call_id=part.call_id, namespace=part.namespace
                    )
                elif part.client_kind is not None:
                    builder.client_call(part.client_kind, part.arguments, call_id=part.call_id)
                else:
                    # a call without arguments still happened
                    builder.function_call(
                        part.name, part.arguments or "{}", call_id=part.call_id, namespace=part.namespace
                    )
            elif isinstance(part, Failure):
                if self._failure is None:
                    self._failure = part.error
            elif isinstance(part, Finish):
                usage = part.usage or {}
                if part.error is not None:
                    builder.fail(part.error, usage)
                else:
                    builder.finish(usage, part.incomplete_reason)

    def _send_calls(self) -> None:
        """Every call the upstream finished, whole and in the order they began, through the
        stages that check finished calls."""
        stages = self._stages
        for state in sorted(self._calls.values(), key=lambda s: s.seq):
            target = self._tools.resolve(state.name)
            arguments = "".join(state.args)
            if target.kind == "custom":
                call = ToolCall(
                    target.name,
                    custom_input_from_arguments(arguments),
                    state.call_id,
                    target.namespace,  # Codex routes a namespaced custom call by it (code mode's exec)
                    custom=True,
                    model_name=state.name,
                    checked=state.from_text,
                )
            else:
                call = ToolCall(
                    target.name,
                    arguments,
                    state.call_id,
                    target.namespace,
                    client_kind=target.kind if target.kind in CLIENT_CALL_KINDS else None,
                    model_name=state.name,
                    checked=state.from_text,
                )
            self._emit(stages.feed(call))
        self._calls.clear()

    # -- the end

    def _responses_usage(self) -> dict[str, Any] | None:
        return chat_usage_to_responses(self._usage) if self._usage is not None else None

    def _terminal(self) -> None:
        """The closing events and the terminal one, into the builder. If anything here raises,
        `fail()` still produces the terminal event."""
        self._emit(self._stages.flush())
        incomplete = _INCOMPLETE_REASONS.get(self._finish_reason or "")
        if incomplete:
            self._calls.clear()  # a truncated turn runs no tool: its calls may be cut mid-arguments
        else:
            self._send_calls()
        self._emit(self._stages.feed(Finish(self._responses_usage(), self._output_chars, incomplete)))
