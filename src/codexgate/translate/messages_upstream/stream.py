"""An Anthropic Messages event stream -> the turn (translate/turn.py). Pure and synchronous.

Anthropic streams one message as `message_start`, then per content block
`content_block_start` / `content_block_delta`... / `content_block_stop`, then `message_delta`
(the stop reason and the output's usage) and `message_stop`; `ping` may come anywhere and an
`error` event ends a stream that failed. What each block becomes:

- `text` (`text_delta`): answer text.
- `thinking` (`thinking_delta`, then `signature_delta`): reasoning text; at the block's stop
  the reasoning item closes with the whole block, text and signature, kept in its
  `encrypted_content` (translate/reasoning.py `encode_thinking`) so that it goes back exactly
  as it came (translate/messages_upstream/messages.py).
- `redacted_thinking`: a reasoning item of its own with nothing to show, its `data` kept the
  same way.
- `tool_use` (`input_json_delta`): a tool call by the flat name the model was shown, which
  the turn resolves through the catalogue (a custom tool's `{"input": ...}` unwrapped, names
  restored to their namespace); a block whose input came whole in its start is fed that.
- other blocks (a server tool's, which the gateway never offers): counted and left out.

Usage: Anthropic counts the input apart from what it read from or wrote to the cache; the
canonical `input_tokens` is their sum, `cached_tokens` the cache reads, and
`cache_creation_tokens` (a gateway extension the Messages face reads) the writes.

The stop reason: `end_turn` and `tool_use` complete the response, `stop_sequence` too (the
sequence itself is not carried: the turn has no field for it yet), `max_tokens` and
`model_context_window_exceeded` end it incomplete (max_output_tokens), `refusal` ends it
incomplete (content_filter), with what the model wrote before it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from codexgate.errors import UpstreamStreamCut
from codexgate.translate.envelope import token_count
from codexgate.translate.event_reader import EventReader
from codexgate.translate.reasoning import encode_thinking
from codexgate.translate.turn import Turn
from codexgate.translate.upstream_errors import classify

__all__ = ["MALFORMED_EVENTS", "UNKNOWN_BLOCKS", "MessagesStreamReader", "read_usage"]

MALFORMED_EVENTS = "upstream.malformed_chunks"  # counts key: events skipped as unreadable
UNKNOWN_BLOCKS = "upstream.messages.block_left_out"  # counts key: blocks of kinds not carried

# Anthropic's stop reasons -> the turn's finish reasons (None: by whether the model called).
_FINISH: Mapping[str, str | None] = {
    "end_turn": None, "tool_use": "tool_calls", "stop_sequence": None, "pause_turn": None,
    "max_tokens": "length", "model_context_window_exceeded": "length", "refusal": "content_filter",
}  # fmt: skip


def read_usage(usage: Any) -> dict[str, Any] | None:
    """Anthropic's `usage` as the turn takes it (Responses-shaped), read leniently; None when
    it holds no count (the turn then estimates one)."""
    if not isinstance(usage, dict):
        return None
    fresh = token_count(usage.get("input_tokens"))
    read = token_count(usage.get("cache_read_input_tokens"))
    written = token_count(usage.get("cache_creation_input_tokens"))
    output = token_count(usage.get("output_tokens"))
    input_tokens = fresh + read + written
    if not input_tokens and not output:
        return None
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": read, "cache_creation_tokens": written},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output,
    }


@dataclass(slots=True)
class _Block:
    """One content block of the message, as far as it was read."""

    kind: str
    text: list[str] = field(default_factory=list)  # thinking text
    signature: list[str] = field(default_factory=list)
    data: str = ""  # a redacted_thinking block's
    whole_input: Any = None  # a tool_use block's input given in its start
    fed_input: bool = False  # ... or in deltas


class MessagesStreamReader(EventReader):
    def __init__(self, turn: Turn, counts: Counter[str] | None = None) -> None:
        """`counts` tallies events skipped as unreadable and blocks left out."""
        self.turn = turn
        self._counts = counts
        self._blocks: dict[int, _Block] = {}
        self._usage: dict[str, Any] = {}  # Anthropic's, the later values over the earlier
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None  # the one the upstream says it met

    def feed(self, event: Any) -> None:
        """One decoded event. Raises the GatewayError of an `error` event, and the turn's (the
        loop guard's); what came before stays in the turn."""
        turn = self.turn
        if turn.done:
            return
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            self.count_malformed()
            return
        handler = _HANDLERS.get(event["type"])
        if handler is not None:
            handler(self, event)
        if turn.failure is not None:
            raise turn.failure

    def feed_whole(self, data: Any, headers: Mapping[str, str]) -> bool:
        """A 200 answer that was one JSON value: a message object (a server that ignored
        `stream`) is read as if streamed; an error object raises, classified; anything else is
        not a Messages answer (False)."""
        if not isinstance(data, dict):
            return False
        if data.get("type") == "error" or ("error" in data and "content" not in data):
            raise classify(0, data, headers)
        if data.get("type") != "message" or not isinstance(data.get("content"), list):
            return False
        self.feed({"type": "message_start", "message": {**data, "content": []}})
        for index, block in enumerate(data["content"]):
            if not isinstance(block, dict):
                continue
            start = dict(block)
            if start.get("type") == "thinking":
                start["thinking"], start["signature"] = "", ""
                self.feed({"type": "content_block_start", "index": index, "content_block": start})
                self._deltas(index, "thinking_delta", "thinking", block.get("thinking"))
                self._deltas(index, "signature_delta", "signature", block.get("signature"))
            else:
                self.feed({"type": "content_block_start", "index": index, "content_block": start})
            self.feed({"type": "content_block_stop", "index": index})
        delta = {"stop_reason": data.get("stop_reason"), "stop_sequence": data.get("stop_sequence")}
        self.feed({"type": "message_delta", "delta": delta, "usage": data.get("usage") or {}})
        self.feed({"type": "message_stop"})
        return True

    def _deltas(self, index: int, kind: str, key: str, value: Any) -> None:
        if isinstance(value, str) and value:
            self.feed({"type": "content_block_delta", "index": index, "delta": {"type": kind, key: value}})

    def end_of_stream_marker(self) -> None:
        """`[DONE]`: not Anthropic's; `message_stop` is what counts."""

    def count_malformed(self) -> None:
        if self._counts is not None:
            self._counts[MALFORMED_EVENTS] += 1

    def finish(self) -> None:
        """The end of the upstream's body. Raises UpstreamStreamCut when no message_stop came."""
        if not self.turn.done:
            raise UpstreamStreamCut(
                "The upstream closed the stream before the message ended (no message_stop)."
            )

    # -- the message

    def _message_start(self, event: dict[str, Any]) -> None:
        message = event.get("message")
        if isinstance(message, dict):
            self._merge_usage(message.get("usage"))

    def _merge_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self._usage.update({k: v for k, v in usage.items() if v is not None})

    def _message_delta(self, event: dict[str, Any]) -> None:
        delta = event.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
            self._stop_reason = delta["stop_reason"]
            sequence = delta.get("stop_sequence")
            self._stop_sequence = sequence if isinstance(sequence, str) else None
        self._merge_usage(event.get("usage"))

    def _message_stop(self, event: dict[str, Any]) -> None:
        turn = self.turn
        usage = read_usage(self._usage)
        if usage is not None:
            turn.usage(usage)
        reason = self._stop_reason
        finish = _FINISH.get(reason or "end_turn", "length")  # an unknown reason: never complete
        stop_sequence = self._stop_sequence if reason == "stop_sequence" else None
        turn.finish(finish or ("tool_calls" if turn.has_calls else "stop"), stop_sequence)

    def _error(self, event: dict[str, Any]) -> None:
        error = event.get("error")
        if not isinstance(error, dict) or not error:
            error = {"message": "The upstream reported a failure without saying what it was."}
        raise classify(0, {"error": error})

    # -- content blocks

    def _block_start(self, event: dict[str, Any]) -> None:
        index, block = event.get("index"), event.get("content_block")
        if not isinstance(index, int) or not isinstance(block, dict):
            self.count_malformed()
            return
        kind = block.get("type")
        state = self._blocks[index] = _Block(kind if isinstance(kind, str) else "")
        turn = self.turn
        if kind == "text":
            text = block.get("text")
            if isinstance(text, str) and text:
                turn.text(text)
        elif kind == "thinking":
            self._thinking(state, block.get("thinking"))
            signature = block.get("signature")
            if isinstance(signature, str) and signature:
                state.signature.append(signature)
        elif kind == "redacted_thinking":
            data = block.get("data")
            state.data = data if isinstance(data, str) else ""
        elif kind == "tool_use":
            name, call_id = block.get("name"), block.get("id")
            turn.open_call(
                ("tool", index),
                name if isinstance(name, str) else "",
                call_id if isinstance(call_id, str) and call_id else None,
            )
            given = block.get("input")
            state.whole_input = given if isinstance(given, dict) and given else None
        elif self._counts is not None:
            self._counts[UNKNOWN_BLOCKS] += 1

    def _thinking(self, state: _Block, text: Any) -> None:
        if isinstance(text, str) and text:
            state.text.append(text)
            self.turn.reasoning(text)

    def _block_delta(self, event: dict[str, Any]) -> None:
        state = self._blocks.get(event.get("index"))  # type: ignore[arg-type]
        delta = event.get("delta")
        if state is None or not isinstance(delta, dict):
            self.count_malformed()
            return
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if isinstance(text, str) and text:
                self.turn.text(text)
        elif kind == "thinking_delta":
            self._thinking(state, delta.get("thinking"))
        elif kind == "signature_delta":
            signature = delta.get("signature")
            if isinstance(signature, str):
                state.signature.append(signature)
        elif kind == "input_json_delta":
            partial = delta.get("partial_json")
            if isinstance(partial, str) and partial:
                state.fed_input = True
                self.turn.call_arguments(("tool", event["index"]), partial)

    def _block_stop(self, event: dict[str, Any]) -> None:
        index = event.get("index")
        state = self._blocks.get(index)  # type: ignore[arg-type]
        if state is None:
            return
        turn = self.turn
        if state.kind == "thinking":
            block = {
                "type": "thinking",
                "thinking": "".join(state.text),
                "signature": "".join(state.signature),
            }
            turn.close_reasoning(encode_thinking(block))
        elif state.kind == "redacted_thinking":
            turn.close_reasoning(encode_thinking({"type": "redacted_thinking", "data": state.data}))
        elif state.kind == "tool_use" and not state.fed_input and state.whole_input is not None:
            turn.call_arguments(("tool", index), orjson.dumps(state.whole_input).decode())


_HANDLERS: dict[str, Callable[[MessagesStreamReader, dict[str, Any]], None]] = {
    "message_start": MessagesStreamReader._message_start,
    "content_block_start": MessagesStreamReader._block_start,
    "content_block_delta": MessagesStreamReader._block_delta,
    "content_block_stop": MessagesStreamReader._block_stop,
    "message_delta": MessagesStreamReader._message_delta,
    "message_stop": MessagesStreamReader._message_stop,
    "error": MessagesStreamReader._error,
}
