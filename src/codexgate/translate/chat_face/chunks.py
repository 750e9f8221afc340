"""Canonical Responses events -> what a Chat Completions client reads. Pure: no I/O, no clock.

Three answers, one per way a chat answer can go out:
- `ChatChunkEncoder`: a stream of events -> `chat.completion.chunk` dicts, fed batch by batch;
- `chat_completion`: the terminal event of a non-streamed answer -> status and the
  `chat.completion` body (the terminal event holds the whole output, so nothing else is needed);
- `failure_answer`: a `response.failed` event -> status and OpenAI error body; streamed, the
  body alone is the last payload (openai-python raises `APIError` for a payload with `error`).

Both forms read the same items the same way: a streamed answer folded chunk by chunk equals
the non-streamed one (the tests hold them together). Encoding to SSE bytes (`data: {...}`, and
`data: [DONE]` after a success) is the face's framing, not done here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from codexgate.errors import failed_answer
from codexgate.translate.envelope import token_count
from codexgate.wire.responses_events import COMPLETED, FAILED, INCOMPLETE, Event

__all__ = [
    "ChatChunkEncoder",
    "Chunk",
    "PART_SEPARATOR",
    "chat_completion",
    "chat_completion_id",
    "chat_usage",
    "failure_answer",
]

Chunk = dict[str, Any]

# Between the texts of two messages (or two reasoning parts) of one answer: a chat answer has
# one content string, and the two would otherwise run together mid-sentence.
PART_SEPARATOR = "\n\n"

_TEXT_DELTA = "response.output_text.delta"
_SUMMARY_DELTA = "response.reasoning_summary_text.delta"
_REASONING_TEXT_DELTA = "response.reasoning_text.delta"
_REFUSAL_DELTA = "response.refusal.delta"
_ARGUMENTS_DELTA = "response.function_call_arguments.delta"
_CUSTOM_INPUT_DELTA = "response.custom_tool_call_input.delta"
_ITEM_ADDED = "response.output_item.added"
_ITEM_DONE = "response.output_item.done"

# Canonical call item type -> (chat tool-call type, the field of its streamed value)
_CALL_KINDS: dict[Any, tuple[str, str]] = {
    "function_call": ("function", "arguments"),
    "custom_tool_call": ("custom", "input"),
}


def chat_completion_id(response_id: str) -> str:
    """The chat completion id of a response: `resp_abc` -> `chatcmpl-abc`."""
    return "chatcmpl-" + response_id.removeprefix("resp_")


class ChatChunkEncoder:
    """Folds the canonical events of one answer into chat chunks, in order.

    Answer text goes out as `delta.content`, reasoning (summary or raw) as
    `delta.reasoning_content`, function and custom tool calls as `delta.tool_calls` numbered
    from 0, then a chunk with the finish reason and, when asked, a usage chunk. A failure ends
    the stream with an error payload instead. Call `feed` with each batch; after the terminal
    event `finished` is set and `done_marker_follows` tells whether `data: [DONE]` closes the
    stream (after a success only)."""

    __slots__ = (
        "_include_usage",
        "_id",
        "_created",
        "_model",
        "_identified",
        "_text_item",
        "_text_sent",
        "_text_separator",
        "_reasoning_part",
        "_reasoning_sent",
        "_reasoning_separator",
        "_streamed_items",
        "_calls",
        "finished",
        "done_marker_follows",
    )

    def __init__(self, *, include_usage: bool = False) -> None:
        self._include_usage = include_usage
        self._id = "chatcmpl-"
        self._created = 0
        self._model = ""
        self._identified = False
        self._text_item: str | None = None  # the message whose text is going out
        self._text_sent = False
        self._text_separator = False  # a new message began after text went out
        self._reasoning_part: tuple[Any, ...] | None = None  # (item id, event type, part index)
        self._reasoning_sent = False
        self._reasoning_separator = False
        self._streamed_items: set[Any] = set()  # messages and reasoning items with deltas seen
        self._calls: dict[Any, tuple[int, str, str]] = {}  # item id -> (index, chat type, field)
        self.finished = False
        self.done_marker_follows = False

    def feed(self, events: Iterable[Event]) -> list[Chunk]:
        """The chunks the events make (none once the answer has ended)."""
        chunks: list[Chunk] = []
        if self.finished:
            return chunks
        for event in events:
            kind = event["type"]
            # The deltas first: they are nearly every event.
            if kind == _TEXT_DELTA:
                chunk = self._text(event.get("item_id"), event["delta"])
            elif kind == _SUMMARY_DELTA:
                chunk = self._reasoning(
                    (event.get("item_id"), kind, event.get("summary_index")), event["delta"]
                )
            elif kind == _ARGUMENTS_DELTA or kind == _CUSTOM_INPUT_DELTA:
                chunk = self._call_delta(event)
            elif kind == _REASONING_TEXT_DELTA:
                chunk = self._reasoning(
                    (event.get("item_id"), kind, event.get("content_index")), event["delta"]
                )
            elif kind == _REFUSAL_DELTA:
                chunk = self._refusal(event.get("item_id"), event["delta"])
            elif kind == _ITEM_ADDED:
                chunk = self._item_added(event["item"])
            elif kind == _ITEM_DONE:
                chunks += self._item_done(event["item"])
                continue
            elif kind == "response.created":
                self._identify(event["response"])
                chunk = self._chunk({"role": "assistant", "content": ""})
            elif kind == COMPLETED or kind == INCOMPLETE:
                chunks += self._end(kind, event["response"])
                break
            elif kind == FAILED:
                self.finished = True
                chunks.append(failure_answer(event)[1])
                break
            else:  # in_progress, part added/done, the `.done` events: nothing new for a chat client
                continue
            if chunk is not None:
                chunks.append(chunk)
        return chunks

    # -- chunks

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> Chunk:
        chunk: Chunk = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if self._include_usage:
            chunk["usage"] = None  # as OpenAI does: every chunk but the last has a null usage
        return chunk

    def _identify(self, response: dict[str, Any]) -> None:
        self._id = chat_completion_id(str(response.get("id") or ""))
        self._created = response.get("created_at") or 0
        self._model = response.get("model") or ""
        self._identified = True

    # -- text and reasoning

    def _text(self, item_id: Any, delta: str) -> Chunk | None:
        if item_id != self._text_item:  # the first delta of a message
            self._text_item = item_id
            self._streamed_items.add(item_id)
            self._text_separator = self._text_sent
        if not delta:
            return None
        if self._text_separator:
            self._text_separator = False
            delta = PART_SEPARATOR + delta
        self._text_sent = True
        return self._chunk({"content": delta})

    def _reasoning(self, part: tuple[Any, ...], delta: str) -> Chunk | None:
        if part != self._reasoning_part:  # the first delta of a reasoning part
            self._reasoning_part = part
            self._streamed_items.add(part[0])
            self._reasoning_separator = self._reasoning_sent
        if not delta:
            return None
        if self._reasoning_separator:
            self._reasoning_separator = False
            delta = PART_SEPARATOR + delta
        self._reasoning_sent = True
        return self._chunk({"reasoning_content": delta})

    def _refusal(self, item_id: Any, delta: str) -> Chunk | None:
        self._streamed_items.add(item_id)
        return self._chunk({"refusal": delta}) if delta else None

    # -- tool calls

    def _item_added(self, item: dict[str, Any]) -> Chunk | None:
        kinds = _CALL_KINDS.get(item.get("type"))
        if kinds is None:
            # Messages and reasoning come as deltas. Other kinds (tool_search_call,
            # local_shell_call, web_search_call, items passed through) have no chat form: a
            # chat client never advertised the tools that make them, so it could not run them.
            return None
        return self._open_call(item, *kinds, value="")

    def _open_call(self, item: dict[str, Any], chat_type: str, field: str, value: str) -> Chunk:
        index = len(self._calls)
        self._calls[item.get("id")] = (index, chat_type, field)
        named = {"name": item.get("name") or "", field: value or item.get(field) or ""}
        call = {"index": index, "id": item.get("call_id"), "type": chat_type, chat_type: named}
        return self._chunk({"tool_calls": [call]})

    def _call_delta(self, event: Event) -> Chunk | None:
        call = self._calls.get(event.get("item_id"))
        delta = event["delta"]
        if call is None or not delta:
            return None
        index, chat_type, field = call
        return self._chunk({"tool_calls": [{"index": index, chat_type: {field: delta}}]})

    def _item_done(self, item: dict[str, Any]) -> list[Chunk]:
        """Nothing, for an item whose parts went out as deltas. An item that came whole
        (added and done with no deltas between, as a backend may pass one through) goes out
        whole here, so a streamed answer never holds less than the non-streamed one."""
        kind = item.get("type")
        item_id = item.get("id")
        kinds = _CALL_KINDS.get(kind)
        if kinds is not None:
            if item_id in self._calls:
                return []
            return [self._open_call(item, *kinds, value=item.get(kinds[1]) or "")]
        if item_id in self._streamed_items:
            return []
        chunks: list[Chunk | None] = []
        if kind == "message":
            text, refusal = _message_text(item)
            chunks += (self._text(item_id, text), self._refusal(item_id, refusal))
        elif kind == "reasoning":
            for number, piece in enumerate(_reasoning_pieces(item)):
                chunks.append(self._reasoning((item_id, kind, number), piece))
        return [chunk for chunk in chunks if chunk is not None]

    # -- the end

    def _end(self, kind: str, response: dict[str, Any]) -> list[Chunk]:
        self.finished = True
        self.done_marker_follows = True
        if not self._identified:  # no response.created came: the terminal event names it too
            self._identify(response)
        if kind == COMPLETED:
            reason = "tool_calls" if self._calls else "stop"
        else:
            reason = _incomplete_finish_reason(response)
        chunks = [self._chunk({}, reason)]
        if self._include_usage:
            chunks.append(
                {
                    "id": self._id,
                    "object": "chat.completion.chunk",
                    "created": self._created,
                    "model": self._model,
                    "system_fingerprint": None,
                    "choices": [],
                    "usage": chat_usage(response.get("usage")),
                }
            )
        return chunks


# -- the non-streamed answer


def chat_completion(terminal: Event) -> tuple[int, dict[str, Any]]:
    """The HTTP status and body of a non-streamed answer, from its terminal event: a
    `chat.completion` (200) for `response.completed` or `response.incomplete`, the error of
    `failure_answer` for `response.failed`. Raises ValueError for any other event."""
    kind = terminal.get("type")
    if kind == FAILED:
        return failure_answer(terminal)
    if kind != COMPLETED and kind != INCOMPLETE:
        raise ValueError(f"not a terminal event: {kind!r}")
    response = terminal["response"]
    texts: list[str] = []
    refusals: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in response.get("output") or ():
        item_type = item.get("type")
        if item_type == "message":
            text, refusal = _message_text(item)
            texts.append(text)
            refusals.append(refusal)
        elif item_type == "reasoning":
            reasoning += _reasoning_pieces(item)
        elif item_type in _CALL_KINDS:
            chat_type, field = _CALL_KINDS[item_type]
            calls.append(
                {
                    "id": item.get("call_id"),
                    "type": chat_type,
                    chat_type: {"name": item.get("name") or "", field: item.get(field) or ""},
                }
            )
        # Other item kinds have no chat form (see ChatChunkEncoder._item_added).
    content = PART_SEPARATOR.join(text for text in texts if text)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content if content or not calls else None,
        "refusal": "".join(refusals) or None,
    }
    if any(reasoning):
        message["reasoning_content"] = PART_SEPARATOR.join(piece for piece in reasoning if piece)
    if calls:
        message["tool_calls"] = calls
    if kind == INCOMPLETE:
        finish_reason = _incomplete_finish_reason(response)
    else:
        finish_reason = "tool_calls" if calls else "stop"
    body = {
        "id": chat_completion_id(str(response.get("id") or "")),
        "object": "chat.completion",
        "created": response.get("created_at") or 0,
        "model": response.get("model") or "",
        "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": chat_usage(response.get("usage")),
    }
    return 200, body


def failure_answer(terminal: Event) -> tuple[int, dict[str, Any]]:
    """A `response.failed` event as an answer: 504 when the upstream timed out, else 502, and
    the OpenAI error body `{"error": {message, type, param, code}}` (errors.failed_answer, as
    the Responses face answers)."""
    return failed_answer(terminal["response"].get("error"))


def chat_usage(usage: Any) -> dict[str, Any]:
    """Responses `usage` -> chat `usage`, read leniently (zeros for what is absent): usage must
    never cost the end of an answer."""
    usage = usage if isinstance(usage, dict) else {}
    prompt = token_count(usage.get("input_tokens"))
    completion = token_count(usage.get("output_tokens"))
    input_details = usage.get("input_tokens_details")
    output_details = usage.get("output_tokens_details")
    cached = token_count(input_details.get("cached_tokens")) if isinstance(input_details, dict) else 0
    reasoning = token_count(output_details.get("reasoning_tokens")) if isinstance(output_details, dict) else 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": token_count(usage.get("total_tokens")) or prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def _incomplete_finish_reason(response: dict[str, Any]) -> str:
    """`content_filter` when the response was cut for its content; `length` otherwise
    (max_output_tokens, and any reason chat has no word for: the answer is cut short)."""
    details = response.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    return "content_filter" if reason == "content_filter" else "length"


def _message_text(item: dict[str, Any]) -> tuple[str, str]:
    """A message item's answer text and refusal text, each part's text in order."""
    texts: list[str] = []
    refusals: list[str] = []
    for part in item.get("content") or ():
        if not isinstance(part, dict):
            continue
        if part.get("type") == "output_text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
            refusals.append(part["refusal"])
    return "".join(texts), "".join(refusals)


def _reasoning_pieces(item: dict[str, Any]) -> list[str]:
    """A reasoning item's texts, one per part: its summary parts, then its raw reasoning."""
    pieces: list[str] = []
    for name in ("summary", "content"):
        for part in item.get(name) or ():
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
    return pieces
