"""A Responses upstream's events -> the turn (translate/turn.py). Pure and synchronous.

`ResponsesStreamReader` is what is left of the Responses dialect on the way back: it is fed
the upstream's decoded events one by one (or a whole response object, `feed_response`) and
feeds the turn text, refusals, reasoning, tool calls and the items it passes through whole;
the turn applies the stages (think tags, tool calls written as text, the loop guard, argument
repair, the grammar check, the usage estimate) and makes the client's events.

Servers differ in how much they send: OpenAI streams every delta and repeats it in the `.done`
events; others send fewer (an item's deltas without its `added`, or only its `output_item.done`).
The reader keeps, per output item, what it fed, and at the item's `done` feeds whatever the
deltas did not carry, so both kinds give the same answer. Unknown event types are ignored.

A reasoning item is closed with the upstream's blob wrapped (translate/responses_upstream/request.py
`wrap_reasoning`), so the gateway knows its own when the client sends it back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from codexgate.errors import (
    UpstreamBadRequest,
    UpstreamError,
    UpstreamServerError,
    UpstreamStreamCut,
)
from codexgate.translate.catalogue import LOCAL_SHELL_NAME, TOOL_SEARCH_NAME, flat_name
from codexgate.translate.chat_upstream.items import local_shell_arguments, tool_search_arguments
from codexgate.translate.envelope import chat_usage_to_responses, token_count
from codexgate.translate.event_reader import EventReader
from codexgate.translate.responses_upstream.request import TextField, wrap_reasoning
from codexgate.translate.turn import Turn
from codexgate.translate.upstream_errors import classify
from codexgate.wire.responses_events import TERMINAL as _TERMINAL

__all__ = ["MALFORMED_EVENTS", "ResponsesStreamReader", "read_usage", "upstream_failure"]

MALFORMED_EVENTS = "upstream.malformed_chunks"  # counts key: events skipped as unreadable

# How a Responses upstream says why an answer is incomplete -> the turn's finish reasons.
_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}
_SUMMARY_PART_SEPARATOR = "\n\n"
# Items the turn builds from parts; every other output item is passed through whole.
_CALL_KINDS = frozenset(("function_call", "custom_tool_call"))


def read_usage(usage: Any) -> dict[str, Any] | None:
    """A Responses `usage` object as the turn takes it, read leniently (never raises); None
    when it holds no count, so the turn estimates one (Codex only compacts on counts)."""
    if not isinstance(usage, dict):
        return None
    if "prompt_tokens" in usage and "input_tokens" not in usage:
        usage = chat_usage_to_responses(usage)  # servers that mix the dialects
    input_tokens = token_count(usage.get("input_tokens"))
    output_tokens = token_count(usage.get("output_tokens"))
    if not input_tokens and not output_tokens:
        return None
    input_details = usage.get("input_tokens_details")
    output_details = usage.get("output_tokens_details")
    cached = token_count(input_details.get("cached_tokens")) if isinstance(input_details, dict) else 0
    reasoning = token_count(output_details.get("reasoning_tokens")) if isinstance(output_details, dict) else 0
    details: dict[str, Any] = {"cached_tokens": cached}
    if isinstance(input_details, dict) and "cache_write_tokens" in input_details:
        details["cache_write_tokens"] = token_count(input_details["cache_write_tokens"])
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": details,
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": token_count(usage.get("total_tokens")) or input_tokens + output_tokens,
    }


def upstream_failure(error: Any) -> UpstreamError:
    """The upstream's error object (of `response.failed` or an `error` event) as the
    gateway's error: classified (translate/upstream_errors.py), keeping the upstream's own
    code when classifying finds nothing better (`invalid_prompt`, `cyber_policy`, or another
    codexgate's codes all mean something to Codex)."""
    if not isinstance(error, dict) or not error:
        error = {"message": "The upstream reported a failure without saying what it was."}
    failure = classify(0, {"error": error})
    code = error.get("code")
    if type(failure) in (UpstreamServerError, UpstreamBadRequest) and isinstance(code, str) and code:
        if not code.isdigit() and len(code) <= 64:
            failure.code = code
    return failure


def _parts_text(parts: Any, kinds: tuple[str, ...], key: str = "text", separator: str = "") -> str:
    """The text of the parts of these kinds (a message's content, a reasoning summary)."""
    if not isinstance(parts, list):
        return ""
    texts = [p.get(key) for p in parts if isinstance(p, dict) and p.get("type") in kinds]
    return separator.join(t for t in texts if isinstance(t, str))


@dataclass(slots=True)
class _Item:
    """One output item of the upstream's response, as far as the reader fed it."""

    kind: str
    key: object  # the turn's key for a call
    item_id: str | None = None
    text: list[str] = field(default_factory=list)  # answer text, reasoning summary or call arguments
    refusal: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)  # raw reasoning text
    summary_index: int | None = None
    opened: bool = False  # a call opened in the turn
    named: bool = False  # ... with its name
    finished: bool = False


class ResponsesStreamReader(EventReader):
    def __init__(self, turn: Turn, upstream: str, counts: Counter[str] | None = None) -> None:
        """`upstream`: the upstream's configured name, which its reasoning blobs are wrapped
        with. `counts` tallies events skipped as unreadable."""
        self.turn = turn
        self._upstream = upstream
        self._counts = counts
        self._items: dict[object, _Item] = {}  # by item id and by output index
        self._current: dict[str, _Item] = {}  # the last item of each kind
        self._positions = 0  # items met, for the turn's keys

    def feed(self, event: Any) -> None:
        """One decoded event. Raises the GatewayError of a failure the upstream reported, and
        the turn's (the loop guard's); what came before stays in the turn and goes out
        ahead of `fail()`'s events."""
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

    def feed_response(self, response: Any) -> None:
        """A whole response object (an answer that was not streamed): its output items as if
        each had been streamed done, then its status as the terminal event. Raises like
        `feed`, and UpstreamError for a response that is not finished."""
        if not isinstance(response, dict):
            raise UpstreamError("The upstream's answer is not a response object.")
        output = response.get("output")
        for position, item in enumerate(output if isinstance(output, list) else ()):
            self._item_done({"output_index": position, "item": item})
            if self.turn.failure is not None:
                raise self.turn.failure
            if self.turn.done:
                return
        status = response.get("status")
        if status in ("completed", "incomplete", "failed"):
            self.feed({"type": f"response.{status}", "response": response})
        elif status is None:
            self._completed({"response": response})  # servers that leave the status out
        else:
            raise UpstreamError(f"The upstream's response is {str(status)[:40]!r}, not finished.")

    def feed_whole(self, data: Any, headers: Mapping[str, str]) -> bool:
        """A 200 answer that was one JSON value: a response object (a server that ignored
        `stream`, or a terminal event without its framing) is read whole; an error object
        raises, classified with its own message; anything else is not a Responses answer."""
        if (
            isinstance(data, dict)
            and data.get("type") in _TERMINAL
            and isinstance(data.get("response"), dict)
        ):
            data = data["response"]
        response = isinstance(data, dict) and (data.get("object") == "response" or "output" in data)
        if isinstance(data, dict) and data.get("error") and not response:
            raise classify(0, data, headers)
        if response:
            self.feed_response(data)
        return bool(response)

    def end_of_stream_marker(self) -> None:
        """`[DONE]`, which some servers send after the terminal event: the terminal event is
        what counts."""

    def count_malformed(self) -> None:
        """An upstream event that was skipped because it could not be read."""
        if self._counts is not None:
            self._counts[MALFORMED_EVENTS] += 1

    def finish(self) -> None:
        """The end of the upstream's body. Raises UpstreamStreamCut when no terminal event came."""
        if not self.turn.done:
            raise UpstreamStreamCut(
                "The upstream closed the stream before the response ended (no response.completed)."
            )

    # -- the items, by the upstream's item id or output index

    def _item(self, event: dict[str, Any], kind: str, item: dict[str, Any] | None = None) -> _Item:
        """The state of the item an event is about: found by its id, else its output index,
        else the item of that kind being written (servers that give neither); a new one when
        the upstream never added it."""
        item_id = item.get("id") if item is not None else event.get("item_id")
        item_id = item_id if isinstance(item_id, str) and item_id else None
        index = event.get("output_index")
        index = index if isinstance(index, int) and not isinstance(index, bool) else None
        found = self._items.get(("id", item_id)) if item_id is not None else None
        if found is None and index is not None:
            placed = self._items.get(("index", index))
            if placed is not None and (item_id is None or placed.item_id in (None, item_id)):
                found = placed
        if found is None and item_id is None:
            current = self._current.get(kind)
            found = current if current is not None and not current.finished else None
        if found is None or found.kind != kind:
            self._positions += 1
            found = _Item(kind, ("item", self._positions), item_id)
        if item_id is not None:
            self._items.setdefault(("id", item_id), found)
        if index is not None:
            self._items.setdefault(("index", index), found)
        self._current[kind] = found
        return found

    def _added(self, event: dict[str, Any]) -> None:
        item = event.get("item")
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            return
        state = self._item(event, item["type"], item)
        if item["type"] in _CALL_KINDS:
            # Its arguments come as deltas or with its done item, never from here: a server
            # that put them here too would have them said twice.
            self._open_call(state, item)

    def _item_done(self, event: dict[str, Any]) -> None:
        item = event.get("item")
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            return
        kind = item["type"]
        state = self._item(event, kind, item)
        if state.finished:
            return
        state.finished = True
        if kind == "message":
            self._complete_message(state, item)
        elif kind == "reasoning":
            self._close_reasoning(state, item)
        elif kind in _CALL_KINDS:
            self._open_call(state, item)
            self._complete_call(state, item)
        elif kind == "tool_search_call" and item.get("execution", "client") == "client":
            self._client_call(state, item, TOOL_SEARCH_NAME, tool_search_arguments(item))
        elif kind == "local_shell_call":
            self._client_call(state, item, LOCAL_SHELL_NAME, local_shell_arguments(item))
        else:
            # Hosted calls (web_search_call, image_generation_call, mcp_call...), compaction,
            # and kinds codexgate does not know: the client reads them as they are.
            self.turn.item(item)

    # -- text

    def _text_delta(self, event: dict[str, Any]) -> None:
        delta = event.get("delta")
        if isinstance(delta, str) and delta:
            self._item(event, "message").text.append(delta)
            self.turn.text(delta)

    def _refusal_delta(self, event: dict[str, Any]) -> None:
        delta = event.get("delta")
        if isinstance(delta, str) and delta:
            self._item(event, "message").refusal.append(delta)
            self.turn.refusal(delta)

    def _complete_message(self, state: _Item, item: dict[str, Any]) -> None:
        """What the deltas did not carry of a finished message (all of it, for servers that
        send only the done item)."""
        content = item.get("content")
        text = _parts_text(content, ("output_text",))
        rest = _rest(state.text, text)
        if rest:
            self.turn.text(rest)
        refusal = _parts_text(content, ("refusal",), key="refusal")
        rest = _rest(state.refusal, refusal)
        if rest:
            self.turn.refusal(rest)

    # -- reasoning

    def _summary_delta(self, event: dict[str, Any]) -> None:
        delta = event.get("delta")
        if not isinstance(delta, str) or not delta:
            return
        state = self._item(event, "reasoning")
        index = event.get("summary_index")
        if isinstance(index, int) and index != state.summary_index:
            if state.summary_index is not None and state.text:
                # A new summary section: the turn's item has one summary, so sections are
                # joined the way the done item's parts are (_close_reasoning).
                state.text.append(_SUMMARY_PART_SEPARATOR)
                self.turn.reasoning(_SUMMARY_PART_SEPARATOR)
            state.summary_index = index
        state.text.append(delta)
        self.turn.reasoning(delta)

    def _reasoning_text_delta(self, event: dict[str, Any]) -> None:
        delta = event.get("delta")
        if isinstance(delta, str) and delta:
            self._item(event, "reasoning").content.append(delta)
            self.turn.reasoning(delta)

    def _close_reasoning(self, state: _Item, item: dict[str, Any]) -> None:
        summary = _parts_text(item.get("summary"), ("summary_text",), separator=_SUMMARY_PART_SEPARATOR)
        content = _parts_text(item.get("content"), ("reasoning_text",))
        where: TextField
        if state.content or (not state.text and not summary and content):
            where, rest = "content", _rest(state.content, content)
        else:
            where, rest = "summary", _rest(state.text, summary)
        if rest:
            self.turn.reasoning(rest)
        blob = item.get("encrypted_content")
        blob = blob if isinstance(blob, str) and blob else None
        if blob is None and not (state.text or state.content or rest):
            return  # nothing said and nothing to give back: no item
        item_id = item.get("id") if isinstance(item.get("id"), str) else state.item_id
        self.turn.close_reasoning(wrap_reasoning(self._upstream, item_id, where, blob))

    # -- tool calls

    def _open_call(self, state: _Item, item: dict[str, Any]) -> None:
        name = item.get("name")
        name = name if isinstance(name, str) else ""
        namespace = item.get("namespace")
        namespace = namespace if isinstance(namespace, str) and namespace else None
        if state.opened:
            if name and not state.named:
                # Opened by an arguments delta before its name came: the name now, flat (the
                # call is open without its namespace, and the catalogue knows flat names).
                state.named = True
                self.turn.call_name(state.key, flat_name(namespace, name))
            return
        state.opened = True
        state.named = bool(name)
        call_id = item.get("call_id")
        self.turn.open_call(
            state.key,
            name,
            call_id if isinstance(call_id, str) and call_id else None,
            namespace=namespace,
            raw_input=item["type"] == "custom_tool_call",
        )

    def _complete_call(self, state: _Item, item: dict[str, Any]) -> None:
        """A call's id and arguments (or raw input) where the item has more than was fed."""
        call_id = item.get("call_id")
        if isinstance(call_id, str) and call_id:
            self.turn.call_id(state.key, call_id)
        value = item.get("input" if item["type"] == "custom_tool_call" else "arguments")
        if isinstance(value, dict):  # some servers send an object instead of a string
            value = orjson.dumps(value).decode()
        if isinstance(value, str):
            rest = _rest(state.text, value)
            if rest:
                state.text.append(rest)
                self.turn.call_arguments(state.key, rest)

    def _arguments_delta(self, event: dict[str, Any]) -> None:
        delta = event.get("delta")
        if not isinstance(delta, str) or not delta:
            return
        kind = "custom_tool_call" if event["type"].startswith("response.custom") else "function_call"
        state = self._item(event, kind)
        if not state.opened:
            self._open_call(state, {"type": kind})  # its name comes with the done item
        state.text.append(delta)
        self.turn.call_arguments(state.key, delta)

    def _arguments_done(self, event: dict[str, Any]) -> None:
        kind = "custom_tool_call" if event["type"].startswith("response.custom") else "function_call"
        state = self._item(event, kind)
        if state.opened:
            value = event.get("input" if kind == "custom_tool_call" else "arguments")
            self._complete_call(state, {"type": kind, "arguments": value, "input": value})

    def _client_call(self, state: _Item, item: dict[str, Any], name: str, arguments: str) -> None:
        """A call of a client-run tool with no function form (tool_search, local_shell): the
        turn resolves it through the catalogue like a function call by that name."""
        call_id = item.get("call_id")
        self.turn.open_call(state.key, name, call_id if isinstance(call_id, str) and call_id else None)
        self.turn.call_arguments(state.key, arguments)

    # -- the end

    def _completed(self, event: dict[str, Any]) -> None:
        self._usage(event)
        self.turn.finish("tool_calls" if self.turn.has_calls else "stop")

    def _incomplete(self, event: dict[str, Any]) -> None:
        self._usage(event)
        response = event.get("response")
        details = response.get("incomplete_details") if isinstance(response, dict) else None
        reason = details.get("reason") if isinstance(details, dict) else None
        # An unknown reason is still an incomplete answer: never one to complete.
        self.turn.finish(_INCOMPLETE.get(reason if isinstance(reason, str) else "", "length"))

    def _failed(self, event: dict[str, Any]) -> None:
        self._usage(event)
        response = event.get("response")
        raise upstream_failure(response.get("error") if isinstance(response, dict) else None)

    def _error(self, event: dict[str, Any]) -> None:
        error = event.get("error")
        if not isinstance(error, dict):  # OpenAI's shape: the fields on the event itself
            error = {k: event[k] for k in ("code", "message", "param") if event.get(k) is not None}
        raise upstream_failure(error)

    def _usage(self, event: dict[str, Any]) -> None:
        response = event.get("response")
        usage = read_usage(response.get("usage")) if isinstance(response, dict) else None
        if usage is not None:
            self.turn.usage(usage)


def _rest(fed: list[str], whole: str) -> str:
    """What `whole` has beyond what was fed; '' when it says something else (the deltas the
    turn already has win: they cannot be taken back)."""
    if not fed:
        return whole
    said = "".join(fed)
    if len(whole) > len(said) and whole.startswith(said):
        return whole[len(said) :]
    return ""


_HANDLERS: dict[str, Callable[[ResponsesStreamReader, dict[str, Any]], None]] = {
    "response.output_item.added": ResponsesStreamReader._added,
    "response.output_item.done": ResponsesStreamReader._item_done,
    "response.output_text.delta": ResponsesStreamReader._text_delta,
    "response.refusal.delta": ResponsesStreamReader._refusal_delta,
    "response.reasoning_summary_text.delta": ResponsesStreamReader._summary_delta,
    "response.reasoning_text.delta": ResponsesStreamReader._reasoning_text_delta,
    "response.function_call_arguments.delta": ResponsesStreamReader._arguments_delta,
    "response.function_call_arguments.done": ResponsesStreamReader._arguments_done,
    "response.custom_tool_call_input.delta": ResponsesStreamReader._arguments_delta,
    "response.custom_tool_call_input.done": ResponsesStreamReader._arguments_done,
    "response.completed": ResponsesStreamReader._completed,
    "response.incomplete": ResponsesStreamReader._incomplete,
    "response.failed": ResponsesStreamReader._failed,
    "error": ResponsesStreamReader._error,
}
