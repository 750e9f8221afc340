"""One exchange as the live view shows it (observability/live_view.py): what was asked, the answer as it
streams, the tool calls and the results the next request carried, and how it ended.

Everything kept is clipped: a turn holds a few tens of KB at most however large the request
or the answer, so the view's ring of recent turns has a fixed bound. What is taken from the
request is taken once, when the exchange starts, so no request is kept alive by the view.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any

import orjson

from codexgate.server.exchange import Exchange
from codexgate.translate.parts import text_of_parts
from codexgate.wire.recent import SameObjects
from codexgate.wire.responses_events import Event

TEXT_LIMIT = 4096  # characters of answer text kept
REASONING_LIMIT = 2048
USER_LIMIT = 2048  # of the request's last user message
ARGUMENTS_LIMIT = 2048  # of one tool call's arguments
OUTPUT_LIMIT = 1024  # of one tool result
MAX_CALLS = 16  # tool calls kept per turn; tool results carried per request
MAX_TOOLS = 64  # tool names listed per request
_NAME_LIMIT = 80
_WALK_LIMIT = 1000  # input items looked at, from the end, for the last user message

# Item types whose `call_id` names a tool call and which carry its result.
_CALL_TYPES = frozenset(("function_call", "custom_tool_call", "local_shell_call", "tool_search_call"))
_OUTPUT_TYPES = frozenset(
    ("function_call_output", "custom_tool_call_output", "local_shell_call_output", "tool_search_output")
)
_ARGUMENT_DELTAS = frozenset(
    ("response.function_call_arguments.delta", "response.custom_tool_call_input.delta")
)
_REASONING_DELTAS = frozenset(("response.reasoning_summary_text.delta", "response.reasoning_text.delta"))


@dataclass(frozen=True, slots=True)
class Seen:
    """What the live view remembers of a conversation's last request."""

    length: int  # input items
    user: str  # its last user message, clipped


class Clipped:
    """Text appended in pieces, kept up to `limit` characters."""

    __slots__ = ("parts", "size", "limit", "clipped")

    def __init__(self, limit: int, text: str = "") -> None:
        self.parts: list[str] = []
        self.size = 0
        self.limit = limit
        self.clipped = False
        if text:
            self.add(text)

    def add(self, text: str) -> None:
        room = self.limit - self.size
        if room <= 0:
            self.clipped = self.clipped or bool(text)
            return
        if len(text) > room:
            text, self.clipped = text[:room], True
        self.parts.append(text)
        self.size += len(text)

    def set(self, text: str) -> None:
        self.parts, self.size, self.clipped = [], 0, False
        self.add(text)

    def text(self) -> str:
        if len(self.parts) > 1:  # join once, so a long stream does not keep thousands of pieces
            self.parts = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""


class ToolCall:
    __slots__ = ("call_id", "name", "kind", "arguments", "result")

    def __init__(self, call_id: str, name: str, kind: str, arguments: str = "") -> None:
        self.call_id = call_id
        self.name = name
        self.kind = kind
        self.arguments = Clipped(ARGUMENTS_LIMIT, arguments)
        self.result: str | None = None  # what the next request carried for it

    def to_json(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "name": self.name,
            "kind": self.kind,
            "arguments": self.arguments.text(),
            "arguments_clipped": self.arguments.clipped,
            "result": self.result,
        }


class Turn:
    """One exchange: filled in from the exchange at its start and end, and from its events
    while a browser watches. `rev` grows with every change, so a browser can drop a stale
    update that arrives after a newer snapshot."""

    def __init__(self, number: int, exchange: Exchange) -> None:
        self.number = number
        self.rev = 0
        self.owner = exchange.caller
        self.started_at = exchange.wall_start
        self.live = True
        self.user = ""
        self.tools: list[str] = []
        self.tool_count = 0
        self.carried: list[dict[str, Any]] = []  # tool results this request brought
        self.text = Clipped(TEXT_LIMIT)
        self.reasoning = Clipped(REASONING_LIMIT)
        self.calls: list[ToolCall] = []
        self._calls_by_item: dict[str, ToolCall] = {}
        self.error: dict[str, Any] | None = None
        self.repairs: dict[str, int] = {}
        # The counts at the start of each upstream that may answer (a pool's members).
        self.counts_before: dict[str, dict[str, int]] | None = None
        self.duration_ms: int | None = None
        self._facts: dict[str, Any] = {}
        self.note(exchange)

    # -- from the exchange

    def note(self, exchange: Exchange) -> None:
        """Copy what the exchange knows so far (model, upstream, status, timing, usage)."""
        first = exchange.first_output
        usage = exchange.usage or {}
        self._facts = {
            "request_id": _clip(exchange.request_id, _NAME_LIMIT),
            "response_id": exchange.response_id,
            "face": exchange.face,
            "model": _clip(exchange.model, _NAME_LIMIT),
            "upstream": exchange.upstream,  # a pool's member once it took the request
            "route": exchange.route,  # the pool's route that answered (it or a fallback)
            "status": exchange.status,
            "outcome": exchange.outcome,
            "ttft_ms": None if first is None else round((first - exchange.started) * 1000),
            "input_tokens": usage.get("input_tokens"),
            "output_tokens": usage.get("output_tokens"),
            "cached_tokens": (usage.get("input_tokens_details") or {}).get("cached_tokens"),
            "reasoning_tokens": (usage.get("output_tokens_details") or {}).get("reasoning_tokens"),
        }
        self.rev += 1

    @property
    def ttft_ms(self) -> int | None:
        ttft: int | None = self._facts.get("ttft_ms")
        return ttft

    def read_request(self, req: Any, earlier: Seen | None = None) -> Seen:
        """Take the last user message, the tools offered and the tool results carried from the
        canonical request (`req` is None for a request refused before it was read).

        `earlier`: what the conversation's previous request was seen as. Codex re-sends the
        whole history, so only the items past the previous request's are looked at for a new
        user message; without one the previous request's stands. Returns what to remember of
        this request for the next."""
        items = req.input if isinstance(getattr(req, "input", None), list) else []
        self.carried = carried_results(items)
        since = earlier.length if earlier is not None and earlier.length <= len(items) else 0
        user = last_user_text(items, since)
        if user is None:
            user = earlier.user if since and earlier is not None else ""
        self.user = user
        tools = getattr(req, "tools", None) or []
        self.tool_count = len(tools)
        self.tools = _tool_names(tools)
        self.rev += 1
        return Seen(len(items), user)

    def finish(self, exchange: Exchange, redact: Callable[[str], str]) -> None:
        """The end: how it went, and the answer's output items from the terminal event.
        `redact` masks secrets in an HTTP error's message (upstream text may echo them)."""
        self.note(exchange)
        self.live = False
        self.duration_ms = round((time.perf_counter() - exchange.started) * 1000)
        terminal = exchange.terminal
        if terminal is not None:
            resource = terminal.get("response") or {}
            self.read_output(resource.get("output") or [])
            error = resource.get("error")
            if isinstance(error, dict):
                self.error = {"code": error.get("code"), "message": _clip(error.get("message"), 2000)}
        elif exchange.outcome not in (None, "completed"):
            message = exchange.error_message  # an HTTP error before any event
            self.error = {
                "code": exchange.outcome,
                "message": _clip(redact(message), 2000) if message else None,
            }

    # -- from the answer's events

    def fold(self, events: list[Event]) -> None:
        """The answer as it streams: text, reasoning, tool calls."""
        for event in events:
            kind = event["type"]
            if kind == "response.output_text.delta":
                self.text.add(event.get("delta") or "")
            elif kind in _REASONING_DELTAS:
                self.reasoning.add(event.get("delta") or "")
            elif kind in _ARGUMENT_DELTAS:
                call = self._calls_by_item.get(event.get("item_id") or "")
                if call is not None:
                    call.arguments.add(event.get("delta") or "")
            elif kind == "response.output_item.added":
                item = event.get("item") or {}
                if item.get("type") in _CALL_TYPES and len(self.calls) < MAX_CALLS:
                    call = ToolCall(str(item.get("call_id") or ""), _call_name(item), item["type"])
                    self.calls.append(call)
                    self._calls_by_item[str(item.get("id") or "")] = call
        self.rev += 1

    def read_output(self, output: list[Any]) -> None:
        """The answer's output items (from the terminal event): authoritative over what the
        deltas built, and all there is when no browser watched the stream."""
        text, reasoning = Clipped(TEXT_LIMIT), Clipped(REASONING_LIMIT)
        calls: list[ToolCall] = []
        for item in output:
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind == "message":
                text.add(_parts_text(item.get("content")))
            elif kind == "reasoning":
                reasoning.add(_parts_text(item.get("summary")) or _parts_text(item.get("content")))
            elif kind in _CALL_TYPES and len(calls) < MAX_CALLS:
                arguments = item.get("arguments", item.get("input", item.get("action")))
                if not isinstance(arguments, str):
                    arguments = "" if arguments is None else _json_text(arguments)
                call = ToolCall(str(item.get("call_id") or ""), _call_name(item), kind, arguments)
                old = next((c for c in self.calls if c.call_id == call.call_id), None)
                call.result = old.result if old is not None else None
                calls.append(call)
        if output:  # an empty output (a failure before any) keeps what streamed
            self.text, self.reasoning, self.calls = text, reasoning, calls
        self._calls_by_item = {}

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.number,
            "rev": self.rev,
            "started_at": self.started_at,
            "live": self.live,
            "duration_ms": self.duration_ms,
            **self._facts,
            "user": self.user,
            "tools": self.tools,
            "tool_count": self.tool_count,
            "carried": self.carried,
            "text": self.text.text(),
            "text_clipped": self.text.clipped,
            "reasoning": self.reasoning.text(),
            "reasoning_clipped": self.reasoning.clipped,
            "calls": [call.to_json() for call in self.calls],
            "error": self.error,
            "repairs": self.repairs,
        }


def carried_results(items: list[Any]) -> list[dict[str, Any]]:
    """The tool results a request carries for the previous answer's calls: its trailing run
    of results, then the calls they answer, read back to the first other item. Codex re-sends
    the whole history every turn; that tail is what is new since the previous request (an
    earlier round's results, before those calls, are not)."""
    names: dict[str, str] = {}
    found: list[dict[str, Any]] = []
    for item in islice(reversed(items), _WALK_LIMIT):
        kind = item.get("type") if isinstance(item, dict) else None
        if kind in _OUTPUT_TYPES and not names:
            found.append(item)
        elif kind in _CALL_TYPES and found:
            names[str(item.get("call_id"))] = _call_name(item)
        else:
            break
    found = found[:MAX_CALLS]
    found.reverse()
    return [
        {
            "call_id": str(item.get("call_id") or ""),
            "name": names.get(str(item.get("call_id")), ""),
            "output": _clip(_output_text(item.get("output")), OUTPUT_LIMIT),
        }
        for item in found
    ]


def last_user_text(items: list[Any], since: int = 0) -> str | None:
    """The text (clipped) of the last user message among `items[since:]`, looking at no more
    than the last _WALK_LIMIT items; None when there is none."""
    for index in range(len(items) - 1, max(since, len(items) - _WALK_LIMIT) - 1, -1):
        item = items[index]
        if isinstance(item, dict) and item.get("role") == "user" and item.get("type", "message") == "message":
            return _clip(_parts_text(item.get("content")), USER_LIMIT) or ""
    return None


def _parts_text(content: Any) -> str:
    return content if isinstance(content, str) else text_of_parts(content)


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        text = _parts_text(output)
        images = sum(1 for part in output if isinstance(part, dict) and part.get("type") == "input_image")
        return text + (f"\n[{images} image(s)]" if images else "")
    return "" if output is None else _json_text(output)


_NAMES: SameObjects[list[str]] = SameObjects(limit=64)


def _tool_names(tools: list[Any]) -> list[str]:
    """The names listed for `tools` (read-only: shared). A request's tools checked lately are
    the objects checked then (wire/recent.py): a list seen before is one lookup."""
    names = _NAMES.get(tools)
    if names is None:
        names = _NAMES.put(tools, [_clip(_tool_name(tool), _NAME_LIMIT) or "?" for tool in tools[:MAX_TOOLS]])
    return names


def _tool_name(tool: Any) -> str:
    if not isinstance(tool, dict):
        return "?"
    name = tool.get("name") or (tool.get("function") or {}).get("name")
    return str(name or tool.get("type") or "?")


def _call_name(item: dict[str, Any]) -> str:
    name = str(item.get("name") or item.get("type") or "?")
    namespace = item.get("namespace")
    return _clip(f"{namespace}.{name}" if namespace else name, _NAME_LIMIT) or "?"


def _json_text(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return repr(value)


def _clip(value: Any, limit: int) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
