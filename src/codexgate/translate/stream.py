"""Chat Completions stream chunks -> Responses streaming events. Pure and synchronous.

`ChatStreamTranslator` is fed decoded chunk objects and returns the events they produce, in the
order the OpenAI API uses. The same object folds a non-streaming answer, so the two cannot
drift apart. Whatever happens, the stream it produces ends with exactly one of
`response.completed`, `response.incomplete` or `response.failed`, with every open item closed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from codexgate.errors import GatewayError, ModelOutputLoop, UpstreamStreamCut
from codexgate.translate.client_calls import CLIENT_CALL_KINDS, client_call_item
from codexgate.translate.content import ContentStage
from codexgate.translate.cuts import cut_marker
from codexgate.translate.envelope import Envelope, chat_usage_to_responses, estimated_usage
from codexgate.translate.loops import Loop, RepetitionGuard
from codexgate.translate.patch_grammar import check_custom_input
from codexgate.translate.reasoning import encode_reasoning
from codexgate.translate.repair import repair_arguments
from codexgate.translate.textcalls import CallPiece, TextPiece
from codexgate.translate.tools import CUSTOM_INPUT_PARAM, ToolMap
from codexgate.translate.upstream_errors import classify

Event = dict[str, Any]
IdFactory = Callable[[str], str]

_INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}
MALFORMED_CHUNKS = "upstream.malformed_chunks"  # counts key: chunks skipped as unreadable


class _Text:
    """Text that arrives in many small deltas, joined once at the end. Deltas are folded into
    blocks as they come: a list of millions of tiny strings costs ~60 bytes a delta on top of
    the text, the blocks next to nothing, and each character is copied only twice."""

    __slots__ = ("_blocks", "_pending")
    _BLOCK = 4096  # deltas per block

    def __init__(self) -> None:
        self._blocks: list[str] = []
        self._pending: list[str] = []

    def append(self, text: str) -> None:
        pending = self._pending
        pending.append(text)
        if len(pending) >= self._BLOCK:
            self._blocks.append("".join(pending))
            pending.clear()

    def text(self) -> str:
        """The whole text, as one string (later events share this object, not copies)."""
        self._blocks.append("".join(self._pending))
        self._pending.clear()
        whole = "".join(self._blocks)
        self._blocks = [whole]
        return whole


@dataclass(slots=True)
class _Message:
    index: int
    item_id: str
    parts: _Text = field(default_factory=_Text)


@dataclass(slots=True)
class _Reasoning:
    index: int
    item_id: str
    parts: _Text = field(default_factory=_Text)


@dataclass(slots=True)
class _ToolCall:
    chat_index: int
    call_id: str | None
    name: str = ""
    args: list[str] = field(default_factory=list)
    index: int = -1  # output_index, once announced
    item_id: str = ""
    custom: bool = False
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
    ) -> None:
        """`content` post-processes the model's text (think tags, tool calls written as text);
        `counts` tallies repairs and checks; `loop_guard` stops a model repeating itself."""
        self._env = envelope
        self._tools = tool_map
        self._new_id = new_id
        self._input_estimate = input_token_estimate
        self._now = now
        self._seq = 0
        self._output: list[dict[str, Any]] = []  # finished items, by output_index
        self._next_index = 0
        self._message: _Message | None = None
        self._reasoning: _Reasoning | None = None
        self._calls: dict[int, _ToolCall] = {}
        self._call_keys: dict[int, int] = {}  # upstream index -> key in _calls, when they differ
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._output_chars = 0
        self._content = content
        self._counts = counts
        # one guard for reasoning, one for the answer
        self._guards = (RepetitionGuard(), RepetitionGuard()) if loop_guard else None
        self._loop: Loop | None = None
        self.done = False  # a terminal event was produced
        # Events made by a feed() that then raised: the caller sends them before fail()'s.
        self.pending_events: list[Event] = []

    # -- public API

    def start(self) -> list[Event]:
        resource = self._env.resource("in_progress", [])
        return [
            self._event("response.created", response=resource),
            self._event("response.in_progress", response=resource),
        ]

    def feed(self, chunk: Any) -> list[Event]:
        """One decoded chunk. Raises an UpstreamError for an error object in the stream; the
        events the chunk made before it are then in `pending_events`."""
        if self.done:
            return []
        if not isinstance(chunk, dict):
            self.count_malformed()
            return []
        events: list[Event] = []
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
                self._delta(delta, events)
                if self._loop is not None:
                    self.pending_events = events
                    raise self._loop_error(self._loop)
            reason = choice.get("finish_reason")
            if reason == "error" or chunk.get("error"):
                # OpenRouter and others end a failed generation with an error object beside
                # choices and finish_reason "error": a failure, whatever follows.
                self.pending_events = events
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
                events.extend(self.finish())
        return events

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
        return self._terminal()

    def finish(self) -> list[Event]:
        """End of the upstream stream ([DONE] or a clean EOF). Raises UpstreamStreamCut when the
        upstream never said it had finished."""
        if self.done:
            return []
        if self._finish_reason is None:
            raise UpstreamStreamCut(
                "The upstream closed the stream before the model finished (no finish_reason, no [DONE])."
            )
        return self._terminal()

    def end_of_stream_marker(self) -> list[Event]:
        """The upstream sent `[DONE]`: a finished stream even if it never gave a finish_reason."""
        if self._finish_reason is None:
            self._finish_reason = "tool_calls" if self._calls else "stop"
        return self.finish()

    def fail(self, error: GatewayError) -> list[Event]:
        """Close every open item, mark what was said as cut (see translate/cuts.py) and end
        with `response.failed`."""
        if self.done:
            return []
        events: list[Event] = []
        try:
            self._flush_content(events)
            self._close_all(events, status="incomplete")
        except Exception:
            # Closing must never cost the terminal event: keep what closed, drop the rest.
            self._message = self._reasoning = None
            self._calls.clear()
            self._output = [item for item in self._output if item]
        self._mark_cut(events)
        self.done = True
        resource = self._env.resource(
            "failed", self._output, usage=self._final_usage(), error=error.to_response_error()
        )
        events.append(self._event("response.failed", response=resource))
        return events

    def fold(self, body: dict[str, Any]) -> list[Event]:
        """A whole non-streamed `chat.completion` body, as one chunk plus the end."""
        events = self.start()
        events.extend(self.feed(body))
        events.extend(self.end_of_stream_marker())
        return events

    # -- deltas

    def _delta(self, delta: dict[str, Any], events: list[Event]) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            self._reasoning_delta(reasoning, events)
        content = delta.get("content")
        if isinstance(content, str) and content:
            if self._content is None:
                self._text_delta(content, events)
            else:
                self._content_pieces(self._content.feed(content), events)
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self._text_delta(refusal, events)
        tool_calls = delta.get("tool_calls")
        if tool_calls and isinstance(tool_calls, list):
            for position, call in enumerate(tool_calls):
                if isinstance(call, dict):
                    self._tool_delta(call, position, events)

    def _watch(self, channel: int, text: str) -> None:
        if self._guards is not None and self._loop is None:
            self._loop = self._guards[channel].feed(text)

    def _loop_error(self, loop: Loop) -> ModelOutputLoop:
        if self._counts is not None:
            self._counts["loops.stopped"] += 1
        unit = loop.unit if len(loop.unit) <= 80 else loop.unit[:77] + "..."
        return ModelOutputLoop(
            f"codexgate stopped the model: it repeated the same {len(loop.unit)} characters at least "
            f"{loop.repeats} times in a row ({unit!r}). A repetition penalty in the model's settings "
            "(see `codexgate doctor`) usually prevents this."
        )

    def _content_pieces(self, pieces: list[Any], events: list[Event]) -> None:
        for piece in pieces:
            if isinstance(piece, TextPiece):
                self._text_delta(piece.text, events)
            elif isinstance(piece, CallPiece):
                self._text_call(piece, events)
            else:
                self._reasoning_delta(piece[1], events)

    def _flush_content(self, events: list[Event]) -> None:
        """Release what the content stage still holds (once, at the end of the message)."""
        if self._content is not None:
            stage, self._content = self._content, None
            self._content_pieces(stage.finish(), events)

    def _text_call(self, piece: CallPiece, events: list[Event]) -> None:
        self._close_reasoning(events)
        self._close_message(events)
        key = -1 - len(self._calls)  # apart from the upstream's own call indexes
        self._calls[key] = _ToolCall(
            key, None, piece.name, [piece.arguments], seq=len(self._calls), from_text=True
        )

    def _reasoning_delta(self, text: str, events: list[Event]) -> None:
        if self._reasoning is None:
            self._close_message(events)
            self._reasoning = r = _Reasoning(self._take_index(), self._new_id("rs"))
            item = {"type": "reasoning", "id": r.item_id, "summary": [], "status": "in_progress"}
            events.append(self._event("response.output_item.added", output_index=r.index, item=item))
            events.append(
                self._event(
                    "response.reasoning_summary_part.added",
                    item_id=r.item_id,
                    output_index=r.index,
                    summary_index=0,
                    part={"type": "summary_text", "text": ""},
                )
            )
        r = self._reasoning
        r.parts.append(text)
        self._output_chars += len(text)
        self._watch(0, text)
        events.append(
            self._event(
                "response.reasoning_summary_text.delta",
                item_id=r.item_id,
                output_index=r.index,
                summary_index=0,
                delta=text,
            )
        )

    def _text_delta(self, text: str, events: list[Event]) -> None:
        if self._message is None:
            self._close_reasoning(events)
            self._message = m = _Message(self._take_index(), self._new_id("msg"))
            item = {
                "type": "message",
                "id": m.item_id,
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            events.append(self._event("response.output_item.added", output_index=m.index, item=item))
            events.append(
                self._event(
                    "response.content_part.added",
                    item_id=m.item_id,
                    output_index=m.index,
                    content_index=0,
                    part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
                )
            )
        m = self._message
        m.parts.append(text)
        self._output_chars += len(text)
        self._watch(1, text)
        events.append(
            self._event(
                "response.output_text.delta",
                item_id=m.item_id,
                output_index=m.index,
                content_index=0,
                delta=text,
                logprobs=[],
            )
        )

    def _tool_delta(self, call: dict[str, Any], position: int, events: list[Event]) -> None:
        """Accumulate a tool call. Calls become items only once the upstream has finished its
        turn (`_close_calls`): the client runs a call as soon as it sees it done, so a call cut
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
            self._flush_content(events)  # the text before a structured call is complete
            self._close_reasoning(events)
            self._close_message(events)
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

    def _announce_call(self, state: _ToolCall, events: list[Event]) -> None:
        if state.index >= 0:
            return
        target = self._tools.resolve(state.name)
        state.custom = target.kind == "custom"
        state.index = self._take_index()
        state.call_id = state.call_id or self._new_id("call")
        if state.custom:
            state.item_id = self._new_id("ctc")
            item: dict[str, Any] = {
                "type": "custom_tool_call",
                "id": state.item_id,
                "status": "in_progress",
                "call_id": state.call_id,
                "name": target.name,
                "input": "",
            }
            if target.namespace:  # Codex routes a namespaced custom call by it (code mode's exec)
                item["namespace"] = target.namespace
        elif target.kind in CLIENT_CALL_KINDS:
            state.item_id = self._new_id("fc")
            item = client_call_item(target.kind, state.item_id, state.call_id, "", "in_progress")
        else:
            state.item_id = self._new_id("fc")
            item = {
                "type": "function_call",
                "id": state.item_id,
                "status": "in_progress",
                "call_id": state.call_id,
                "name": target.name,
                "arguments": "",
            }
            if target.namespace:
                item["namespace"] = target.namespace
        events.append(self._event("response.output_item.added", output_index=state.index, item=item))

    # -- closing items

    def _take_index(self) -> int:
        index = self._next_index
        self._next_index += 1
        self._output.append({})  # placeholder keeps output_index order when items interleave
        return index

    def _close_message(self, events: list[Event], status: str = "completed") -> None:
        m = self._message
        if m is None:
            return
        self._message = None
        text = m.parts.text()
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        events.append(
            self._event(
                "response.output_text.done",
                item_id=m.item_id,
                output_index=m.index,
                content_index=0,
                text=text,
                logprobs=[],
            )
        )
        events.append(
            self._event(
                "response.content_part.done",
                item_id=m.item_id,
                output_index=m.index,
                content_index=0,
                part=part,
            )
        )
        item = {"type": "message", "id": m.item_id, "status": status, "role": "assistant", "content": [part]}
        self._done_item(m.index, item, events)

    def _close_reasoning(self, events: list[Event]) -> None:
        r = self._reasoning
        if r is None:
            return
        self._reasoning = None
        text = r.parts.text()
        part = {"type": "summary_text", "text": text}
        events.append(
            self._event(
                "response.reasoning_summary_text.done",
                item_id=r.item_id,
                output_index=r.index,
                summary_index=0,
                text=text,
            )
        )
        events.append(
            self._event(
                "response.reasoning_summary_part.done",
                item_id=r.item_id,
                output_index=r.index,
                summary_index=0,
                part=part,
            )
        )
        item = {
            "type": "reasoning",
            "id": r.item_id,
            "summary": [part],
            "encrypted_content": encode_reasoning(text),
        }
        self._done_item(r.index, item, events)

    def _close_calls(self, events: list[Event]) -> None:
        """Emit every call the upstream finished, whole: added, its input, done."""
        for state in sorted(self._calls.values(), key=lambda s: s.seq):
            self._announce_call(state, events)
            target = self._tools.resolve(state.name)
            arguments = "".join(state.args)
            item: dict[str, Any]
            if state.custom:
                raw = custom_input_from_arguments(arguments)
                grammar = self._tools.custom_grammars.get(state.name)
                if grammar is not None:
                    raw = check_custom_input(raw, grammar, self._counts).text
                self._call_input_events(state, "response.custom_tool_call_input", "input", raw, events)
                item = {
                    "type": "custom_tool_call",
                    "id": state.item_id,
                    "status": "completed",
                    "call_id": state.call_id,
                    "name": target.name,
                    "input": raw,
                }
                if target.namespace:
                    item["namespace"] = target.namespace
            elif target.kind in CLIENT_CALL_KINDS:
                item = client_call_item(target.kind, state.item_id, state.call_id, arguments, "completed")
            else:
                if not state.from_text:
                    # Repair only what is unambiguous; otherwise pass the model's text on and
                    # let the client report the error to the model.
                    checked = repair_arguments(
                        arguments, self._tools.schemas.get(state.name), counts=self._counts
                    )
                    if checked.arguments is not None and checked.outcome == "repaired":
                        arguments = checked.arguments
                arguments = arguments or "{}"  # a call without arguments still happened
                self._call_input_events(
                    state,
                    "response.function_call_arguments",
                    "arguments",
                    arguments,
                    events,
                    name=target.name,
                )
                item = {
                    "type": "function_call",
                    "id": state.item_id,
                    "status": "completed",
                    "call_id": state.call_id,
                    "name": target.name,
                    "arguments": arguments,
                }
                if target.namespace:
                    item["namespace"] = target.namespace
            self._done_item(state.index, item, events)
        self._calls.clear()

    def _call_input_events(
        self, state: _ToolCall, prefix: str, field: str, value: str, events: list[Event], **extra: Any
    ) -> None:
        events.append(
            self._event(f"{prefix}.delta", item_id=state.item_id, output_index=state.index, delta=value)
        )
        events.append(
            self._event(
                f"{prefix}.done", item_id=state.item_id, output_index=state.index, **{field: value}, **extra
            )
        )

    def _close_all(self, events: list[Event], status: str = "completed") -> None:
        self._close_reasoning(events)
        self._close_message(events, status)
        if status == "completed":
            self._close_calls(events)
        else:
            # A failed or truncated turn runs no tool: its calls may be cut mid-arguments,
            # and they were never announced.
            self._calls.clear()
        self._output = [item for item in self._output if item]

    def _mark_cut(self, events: list[Event]) -> None:
        """After a failure: one more item naming this response's items, so that a client
        sending them back as history (Codex's retry) gets them left out upstream."""
        if not self._output:
            return
        index = self._next_index
        self._next_index += 1
        marker = cut_marker(self._new_id("rs"), [item["id"] for item in self._output])
        added = {"type": "reasoning", "id": marker["id"], "summary": [], "status": "in_progress"}
        events.append(self._event("response.output_item.added", output_index=index, item=added))
        self._output.append(marker)
        events.append(self._event("response.output_item.done", output_index=index, item=marker))

    def _done_item(self, index: int, item: dict[str, Any], events: list[Event]) -> None:
        self._output[index] = item
        events.append(self._event("response.output_item.done", output_index=index, item=item))

    # -- the end

    def _final_usage(self) -> dict[str, Any]:
        if self._usage is not None:
            return chat_usage_to_responses(self._usage)
        return estimated_usage(self._input_estimate, self._output_chars)

    def _terminal(self) -> list[Event]:
        """The closing events and the terminal one. `done` is set only once they are all
        built: if anything here raises, `fail()` still produces the terminal event."""
        events: list[Event] = []
        self._flush_content(events)
        reason = self._finish_reason
        incomplete = _INCOMPLETE_REASONS.get(reason or "")
        self._close_all(events, "incomplete" if incomplete else "completed")
        usage = self._final_usage()
        self.done = True
        if incomplete:
            resource = self._env.resource(
                "incomplete", self._output, usage=usage, incomplete_reason=incomplete
            )
            events.append(self._event("response.incomplete", response=resource))
        else:
            resource = self._env.resource("completed", self._output, usage=usage, completed_at=self._now())
            events.append(self._event("response.completed", response=resource))
        return events

    def _event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self._seq}
        self._seq += 1
        event.update(fields)
        return event
