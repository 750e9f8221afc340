"""A Responses upstream's events read the way the Responses backend reads them, without the
network: a turn made as the backend makes one, and SSE bytes (or event dicts) through the
reader, the terminal event guaranteed as the run loop guarantees it."""

from __future__ import annotations

import itertools
from typing import Any

import orjson

from codexgate.translate.responses_upstream.request import ToolFormat, to_upstream_request
from codexgate.translate.responses_upstream.stream import ResponsesStreamReader
from codexgate.translate.turn import Turn, TurnOptions
from codexgate.wire.responses import parse_request

from .codex_requests import CODEX_TOOLS
from .openresponses import STRING, extension_item_schema
from .turns import translate_sse

Event = dict[str, Any]
UPSTREAM = "openai"  # the upstream's configured name, which reasoning blobs are wrapped with
# The Open Responses spec has no hosted tool calls: OpenAI's `web_search_call`, which the
# backend passes through whole, is checked against OpenAI's shape (register it in
# openresponses.EXTENSION_ITEM_SCHEMAS for a test).
WEB_SEARCH_CALL_SCHEMA = extension_item_schema(
    "web_search_call", {"status": STRING}, {"action": {"type": "object"}}
)


def make_turn(
    body: dict[str, Any] | None = None, tool_format: ToolFormat = "functions", **options: Any
) -> Turn:
    """A turn as the backend makes one: the catalogue of the translated request, its policies."""
    body = body or {"model": "m", "input": "hi", "tools": CODEX_TOOLS}
    req = parse_request(body)
    translated = to_upstream_request(req, "up-model", upstream=UPSTREAM, tool_format=tool_format)
    counter = itertools.count()
    settings = {"mark_cuts": True, "think_tags": "off", "text_tool_calls": "off", **options}
    return Turn(
        req, translated.catalogue, TurnOptions(**settings), new_id=lambda p: f"{p}_{next(counter)}",
        now=lambda: 0, response_id="resp_gw", sent=translated.body,
    )  # fmt: skip


def read(data: bytes, split: int | None = None, turn: Turn | None = None) -> list[Event]:
    """SSE bytes (in pieces) through the backend's read path (tests/support/turns.py)."""
    turn = turn or make_turn()
    pieces = [data] if split is None else [data[i : i + split] for i in range(0, len(data), split)]
    return translate_sse(ResponsesStreamReader(turn, UPSTREAM), pieces)


def read_events(raw_events: list[Event], turn: Turn | None = None) -> list[Event]:
    data = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in raw_events)
    return read(data, turn=turn)


def output(events: list[Event]) -> list[dict[str, Any]]:
    return list(events[-1]["response"]["output"])


def text_deltas(text: str, item_id: str = "m1") -> list[Event]:
    return [{"type": "response.output_text.delta", "item_id": item_id, "output_index": 0, "delta": text}]
