"""Canonical Responses events -> what an Anthropic Messages client reads. Pure: no I/O, no clock.

Two answers, one per way a Messages answer goes out:
- `MessagesEventEncoder`: a stream of canonical events -> Messages stream events (dicts), fed
  batch by batch: `message_start`, then for each block `content_block_start`, its deltas,
  `content_block_stop`, then `message_delta` (the stop reason and the usage) and
  `message_stop`; a failure is `event: error` instead of the end;
- `messages_body`: the terminal event of a non-streamed answer -> status and the Messages body
  (the terminal event holds the whole output), or the error.

What Claude Code holds a stream to, kept here:
- blocks are numbered from 0 in the order they start and never interleave: a block stops before
  the next starts. The builder never has two items open at once, but a canonical stream may:
  then the later item's events are held until the earlier one stops;
- a thinking block ends with one `signature_delta` before its stop (translate/messages_face/
  thinking.py says what the signature holds); with `display: "omitted"` no thinking text goes
  out, only the block and its signature;
- `message_start` and `message_delta` carry `input_tokens`, `cache_creation_input_tokens`,
  `cache_read_input_tokens` and `output_tokens`, all four always (`anthropic_usage`);
- a tool_use block never goes out without a name: a call without one is a failure;
- a tool_use block's input is always a JSON object (`tool_input_json`).

Encoding to SSE bytes (`event: NAME` + `data: {...}`) is the face's framing, not done here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import orjson

from codexgate.errors import Code
from codexgate.translate.envelope import token_count
from codexgate.translate.messages_face.errors import anthropic_error
from codexgate.translate.messages_face.thinking import thinking_block
from codexgate.wire.messages_events import (
    CONTENT_BLOCK_DELTA,
    CONTENT_BLOCK_START,
    CONTENT_BLOCK_STOP,
    INPUT_JSON_DELTA,
    MESSAGE_DELTA,
    MESSAGE_START,
    MESSAGE_STOP,
    SIGNATURE_DELTA,
    TEXT_DELTA,
    THINKING_DELTA,
)
from codexgate.wire.responses_events import COMPLETED, FAILED, INCOMPLETE, Event, stop_sequence_of

__all__ = [
    "MessagesEvent",
    "MessagesEventEncoder",
    "anthropic_error",
    "anthropic_usage",
    "message_id",
    "messages_body",
    "tool_input_json",
]

MessagesEvent = dict[str, Any]

_TEXT_DELTA = "response.output_text.delta"
_REFUSAL_DELTA = "response.refusal.delta"
_SUMMARY_DELTA = "response.reasoning_summary_text.delta"
_REASONING_TEXT_DELTA = "response.reasoning_text.delta"
_ITEM_ADDED = "response.output_item.added"
_ITEM_DONE = "response.output_item.done"
_CALLS = frozenset(("function_call", "custom_tool_call"))
# A call's arguments that are no JSON object go out under this key, so the client's check of
# the tool's input reports them to the model, which sees its own words again.
INVALID_ARGUMENTS_KEY = "_invalid_arguments"
_UNNAMED_CALL = (
    "The model called a tool without naming it; codexgate ended the answer rather than send a "
    "tool_use block without a name."
)

# What a held block event is: its start (with the block), a delta (with it), or its stop.
_START, _DELTA, _STOP = 0, 1, 2


def message_id(response_id: str) -> str:
    """The message id of a response: `resp_abc` -> `msg_abc`."""
    return "msg_" + response_id.removeprefix("resp_")


def anthropic_usage(usage: Any) -> dict[str, int]:
    """Responses `usage` -> Anthropic's, read leniently (zeros for what is absent). The
    canonical `input_tokens` counts cached tokens; Anthropic's counts neither the tokens read
    from the cache nor those written to it: `input_tokens_details.cached_tokens` are its
    `cache_read_input_tokens`, `input_tokens_details.cache_creation_tokens` (a gateway key,
    which an Anthropic upstream fills) its `cache_creation_input_tokens`."""
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get("input_tokens_details")
    details = details if isinstance(details, dict) else {}
    cached = token_count(details.get("cached_tokens"))
    created = token_count(details.get("cache_creation_tokens"))
    return {
        "input_tokens": max(0, token_count(usage.get("input_tokens")) - cached - created),
        "cache_creation_input_tokens": created,
        "cache_read_input_tokens": cached,
        "output_tokens": token_count(usage.get("output_tokens")),
    }


def tool_input_json(item: dict[str, Any]) -> str:
    """A call item's input as a JSON object's text: a function call's arguments as they are
    when they are one (no arguments: `{}`); a custom tool's raw input as `{"input": ...}`;
    arguments that are no JSON object under INVALID_ARGUMENTS_KEY."""
    if item.get("type") == "custom_tool_call":
        return orjson.dumps({"input": item.get("input") or ""}).decode()
    arguments = item.get("arguments")
    if not isinstance(arguments, str) or not arguments.strip():
        return "{}"
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        return arguments
    return orjson.dumps({INVALID_ARGUMENTS_KEY: arguments}).decode()


class _Item:
    """A canonical output item as the stream knows it: the kind of block it makes, the block's
    index once started, the block events held while an earlier item is still open."""

    __slots__ = ("key", "kind", "index", "opened", "done", "held")

    def __init__(self, key: Any, kind: str) -> None:
        self.key = key  # its item id
        self.kind = kind  # text, thinking, tool, other
        self.index = -1
        self.opened = False  # its block was started (or its start held)
        self.done = False
        self.held: list[tuple[int, Any]] = []


_KINDS = {"message": "text", "reasoning": "thinking", "function_call": "tool", "custom_tool_call": "tool"}


class MessagesEventEncoder:
    """Folds the canonical events of one answer into Messages stream events, in order. Call
    `feed` with each batch; after the terminal event `finished` is set. `model`: the model the
    client asked for (Claude Code drops thinking signed by another); `show_thinking`: False for
    `display: "omitted"`; `input_tokens`: the estimate `message_start` carries (the upstream's
    count comes with the end, in `message_delta`); `applied_edits`: the context edits the
    gateway applied (translate/messages_face/context_edits.py), which `message_delta` reports."""

    __slots__ = (
        "_model", "_show", "_input_tokens", "_applied", "_started", "_items", "_queue", "_head",
        "_next_index", "_tool_uses", "_refused", "finished",
    )  # fmt: skip

    def __init__(
        self,
        model: str,
        *,
        show_thinking: bool = True,
        input_tokens: int = 0,
        applied_edits: list[dict[str, Any]] | None = None,
    ) -> None:
        self._model = model
        self._show = show_thinking
        self._input_tokens = input_tokens
        self._applied = applied_edits
        self._started = False  # message_start went out
        self._items: dict[Any, _Item] = {}  # by item id
        self._queue: deque[_Item] = deque()  # items not yet stopped, in the order they came
        self._head: _Item | None = None  # the one whose block may go out now
        self._next_index = 0
        self._tool_uses = 0
        self._refused = False
        self.finished = False

    def feed(self, events: Iterable[Event]) -> list[MessagesEvent]:
        """The Messages events the canonical events make (none once the answer has ended)."""
        out: list[MessagesEvent] = []
        if self.finished:
            return out
        for event in events:
            kind = event["type"]
            if kind == _TEXT_DELTA:  # nearly every event: the head's text goes out at once
                delta = event["delta"]
                item = self._items.get(event.get("item_id"))
                if item is not None and item is self._head and item.index >= 0:
                    if delta:
                        out.append({"type": CONTENT_BLOCK_DELTA, "index": item.index,
                                    "delta": {"type": TEXT_DELTA, "text": delta}})  # fmt: skip
                elif delta:
                    self._text(self._item_of(event, "text"), delta, out)
            elif kind == _SUMMARY_DELTA or kind == _REASONING_TEXT_DELTA:
                self._thinking(self._item_of(event, "thinking"), event["delta"], out)
            elif kind == _REFUSAL_DELTA:
                self._refused = True
                if event["delta"]:
                    self._text(self._item_of(event, "text"), event["delta"], out)
            elif kind == _ITEM_ADDED:
                self._added(event["item"], event.get("output_index"))
            elif kind == _ITEM_DONE:
                self._done(event["item"], event.get("output_index"), out)
                if self.finished:
                    break
            elif kind == "response.created":
                self._start(event["response"], out)
            elif kind == COMPLETED or kind == INCOMPLETE:
                self._end(event, out)
                break
            elif kind == FAILED:
                self.finished = True
                out.append(anthropic_error(event["response"].get("error") or {}, in_stream=True)[1])
                break
            # in_progress, parts added and done, the `.done` events: nothing new for a Messages client
        return out

    def head_text_index(self, item_id: Any) -> int:
        """The index of the block the answer text of item `item_id` goes out in now, when that
        item's block is the one open (a text delta for it is then just `text_delta` in that
        block, which the face may write without `feed`); else -1."""
        head = self._head
        if head is None or head.index < 0 or head.key != item_id or self.finished:
            return -1
        return head.index

    # -- items and the order of their blocks

    def _added(self, item: dict[str, Any], output_index: Any) -> _Item:
        key = item.get("id") or ("output", output_index)
        known = self._items.get(key)
        if known is not None:
            return known
        kind = item.get("type")
        state = _Item(key, _KINDS.get(kind, "other") if isinstance(kind, str) else "other")
        self._items[key] = state
        self._queue.append(state)
        if self._head is None:
            self._head = state
        return state

    def _item_of(self, event: Event, kind: str) -> _Item:
        """The item a delta is for; one never added is added now."""
        known = self._items.get(event.get("item_id"))
        if known is not None:
            return known
        placeholder = {"type": "message" if kind == "text" else "reasoning", "id": event.get("item_id")}
        return self._added(placeholder, event.get("output_index"))

    def _emit(self, item: _Item, op: int, payload: Any, out: list[MessagesEvent]) -> None:
        if item is self._head:
            self._apply(item, op, payload, out)
        else:
            item.held.append((op, payload))

    def _apply(self, item: _Item, op: int, payload: Any, out: list[MessagesEvent]) -> None:
        if op == _START:
            item.index = self._next_index
            self._next_index += 1
            out.append({"type": CONTENT_BLOCK_START, "index": item.index, "content_block": payload})
        elif op == _DELTA:
            out.append({"type": CONTENT_BLOCK_DELTA, "index": item.index, "delta": payload})
        else:
            out.append({"type": CONTENT_BLOCK_STOP, "index": item.index})

    def _open(self, item: _Item, block: dict[str, Any], out: list[MessagesEvent]) -> None:
        item.opened = True
        self._emit(item, _START, block, out)

    def _close(self, item: _Item, out: list[MessagesEvent]) -> None:
        """`item` is finished: its block stops (now, or when the items before it have); the
        next item's held events then go out."""
        if item.done:
            return
        item.done = True
        if item.opened:
            self._emit(item, _STOP, None, out)
        if item is not self._head:
            return
        queue = self._queue
        queue.popleft()
        while queue:
            head = self._head = queue[0]
            for op, payload in head.held:
                self._apply(head, op, payload, out)
            head.held.clear()
            if not head.done:
                return
            queue.popleft()
        self._head = None

    # -- text and thinking

    def _text(self, item: _Item, delta: str, out: list[MessagesEvent]) -> None:
        if not item.opened:
            self._open(item, {"type": "text", "text": ""}, out)
        self._emit(item, _DELTA, {"type": TEXT_DELTA, "text": delta}, out)

    def _thinking(self, item: _Item, delta: str, out: list[MessagesEvent]) -> None:
        if not self._show or not delta:  # omitted: the block starts when its signature is known
            return
        if not item.opened:
            self._open(item, {"type": "thinking", "thinking": "", "signature": ""}, out)
        self._emit(item, _DELTA, {"type": THINKING_DELTA, "thinking": delta}, out)

    def _done(self, item: dict[str, Any], output_index: Any, out: list[MessagesEvent]) -> None:
        state = self._added(item, output_index)
        kind = state.kind
        if kind == "text":
            text, refused = message_text(item)
            self._refused = self._refused or refused
            if not state.opened and text:  # an item that came whole: its text at once
                self._text(state, text, out)
        elif kind == "thinking":
            self._thinking_done(state, item, out)
        elif kind == "tool":
            name = item.get("name")
            if not isinstance(name, str) or not name:
                self.finished = True
                out.append(anthropic_error((502, Code.UPSTREAM_ERROR, _UNNAMED_CALL), in_stream=True)[1])
                return
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": item.get("call_id") or item.get("id") or "",
                "name": name,
                "input": {},
            }
            self._open(state, block, out)
            self._emit(state, _DELTA, {"type": INPUT_JSON_DELTA, "partial_json": tool_input_json(item)}, out)
            self._tool_uses += 1
        self._close(state, out)

    def _thinking_done(self, state: _Item, item: dict[str, Any], out: list[MessagesEvent]) -> None:
        block = thinking_block(item, shown=self._show)
        if block is None:
            return
        if block["type"] == "redacted_thinking":  # an item with no text: none was streamed
            self._open(state, block, out)
            return
        if not state.opened:
            self._open(state, {"type": "thinking", "thinking": "", "signature": ""}, out)
            if block["thinking"]:
                self._emit(state, _DELTA, {"type": THINKING_DELTA, "thinking": block["thinking"]}, out)
        self._emit(state, _DELTA, {"type": SIGNATURE_DELTA, "signature": block["signature"]}, out)

    # -- the start and the end

    def _start(self, response: dict[str, Any], out: list[MessagesEvent]) -> None:
        if self._started:
            return
        self._started = True
        usage = {"input_tokens": self._input_tokens, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0, "output_tokens": 0}  # fmt: skip
        message: dict[str, Any] = {
            "id": message_id(str(response.get("id") or "")),
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        out.append({"type": MESSAGE_START, "message": message})

    def _end(self, terminal: Event, out: list[MessagesEvent]) -> None:
        response = terminal["response"]
        self._start(response, out)  # no response.created came: the terminal event names it too
        for index, item in enumerate(response.get("output") or ()):
            # Items the stream never showed (a backend that sends only the end) go out now.
            if isinstance(item, dict) and (item.get("id") or ("output", index)) not in self._items:
                self._done(item, index, out)
                if self.finished:
                    return
        while self._queue:  # items never done (a source that did not close them): stopped, in order
            head = self._head = self._queue[0]
            for op, payload in head.held:
                self._apply(head, op, payload, out)
            head.held.clear()
            if head.done:
                self._queue.popleft()
            else:
                self._close(head, out)
        self.finished = True
        reason, sequence = stop_reason(terminal, self._tool_uses > 0, self._refused)
        delta: MessagesEvent = {
            "type": MESSAGE_DELTA,
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": anthropic_usage(response.get("usage")),
        }
        if self._applied:
            delta["context_management"] = {"applied_edits": self._applied}
        out.append(delta)
        out.append({"type": MESSAGE_STOP})


def stop_reason(terminal: Event, tool_use: bool, refused: bool) -> tuple[str, str | None]:
    """The stop reason of an answer and its stop sequence: `max_tokens` or `refusal` (a content
    filter) for an incomplete one; else `tool_use` when it called a tool, `stop_sequence` when a
    known one ended it, `refusal` when the model refused, `end_turn`."""
    if terminal["type"] == INCOMPLETE:
        details = terminal["response"].get("incomplete_details")
        why = details.get("reason") if isinstance(details, dict) else None
        return ("refusal" if why == "content_filter" else "max_tokens"), None
    if tool_use:
        return "tool_use", None
    sequence = stop_sequence_of(terminal)
    if sequence is not None:
        return "stop_sequence", sequence
    return ("refusal" if refused else "end_turn"), None


def message_text(item: dict[str, Any]) -> tuple[str, bool]:
    """A message item's text (its answer and refusal parts in order) and whether it refused."""
    texts: list[str] = []
    refused = False
    for part in item.get("content") or ():
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "output_text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
            refused = True
    return "".join(texts), refused


# -- the non-streamed answer


def messages_body(
    terminal: Event,
    model: str,
    *,
    show_thinking: bool = True,
    applied_edits: list[dict[str, Any]] | None = None,
) -> tuple[int, dict[str, Any]]:
    """The HTTP status and body of a non-streamed answer, from its terminal event: the Messages
    body (200) for `response.completed` or `.incomplete`, Anthropic's error for
    `response.failed` (or for a tool call without a name). Raises ValueError for any other
    event. The blocks are those the stream would have sent, whole; `applied_edits` as the
    stream's `message_delta` reports them."""
    kind = terminal.get("type")
    if kind == FAILED:
        return anthropic_error(terminal["response"].get("error") or {})
    if kind != COMPLETED and kind != INCOMPLETE:
        raise ValueError(f"not a terminal event: {kind!r}")
    response = terminal["response"]
    content: list[dict[str, Any]] = []
    refused = False
    tool_uses = 0
    for item in response.get("output") or ():
        item_type = item.get("type") if isinstance(item, dict) else None
        if item_type == "message":
            text, said_no = message_text(item)
            refused = refused or said_no
            if text:
                content.append({"type": "text", "text": text})
        elif item_type == "reasoning":
            block = thinking_block(item, shown=show_thinking)
            if block is not None:
                content.append(block)
        elif item_type in _CALLS:
            name = item.get("name")
            if not isinstance(name, str) or not name:
                return anthropic_error((502, Code.UPSTREAM_ERROR, _UNNAMED_CALL))
            tool_uses += 1
            call_id = item.get("call_id") or item.get("id") or ""
            content.append(
                {
                    "type": "tool_use",
                    "id": call_id,
                    "name": name,
                    "input": orjson.loads(tool_input_json(item)),
                }
            )
        # Other item kinds (hosted tools' calls passed through) have no Messages form.
    reason, sequence = stop_reason(terminal, tool_uses > 0, refused)
    body: dict[str, Any] = {
        "id": message_id(str(response.get("id") or "")),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": anthropic_usage(response.get("usage")),
    }
    if applied_edits:
        body["context_management"] = {"applied_edits": applied_edits}
    return 200, body
