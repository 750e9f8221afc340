"""Turns and chat translators for tests, driven the way the backends drive them: without the
network, with counter ids, events taken as they are made."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from codexgate.backends.http.backend import StreamReader
from codexgate.errors import GatewayError
from codexgate.translate.catalogue import catalogue_of
from codexgate.translate.chat_upstream.request import tools_of
from codexgate.translate.chat_upstream.stream import ChatStreamTranslator
from codexgate.translate.reasoning import encode_reasoning
from codexgate.translate.turn import Turn, TurnOptions
from codexgate.wire.responses import parse_request
from codexgate.wire.sse import SSEDecoder

Event = dict[str, Any]

# The chat backend's policies (backends/chat/backend.py), which most tests of the chat path expect.
CHAT_POLICIES: dict[str, Any] = {"reasoning_blob": encode_reasoning, "mark_cuts": True}


def counter_ids() -> Callable[[str], str]:
    counter = itertools.count()
    return lambda prefix: f"{prefix}_{next(counter)}"


def make_turn(
    tools: list[dict[str, Any]] | None = None,
    *,
    body: dict[str, Any] | None = None,
    counts: Counter[str] | None = None,
    response_id: str = "resp_test",
    new_id: Callable[[str], str] | None = None,
    **options: Any,
) -> Turn:
    """A turn for a request with these tools (or this whole Responses body), with the chat
    backend's policies unless `options` say otherwise."""
    body = body or {"model": "test-model", "input": "hi", "tools": tools or []}
    req = parse_request(body)
    settings = {**CHAT_POLICIES, **options}
    return Turn(
        req,
        catalogue_of(tools_of(req)),
        TurnOptions(**settings),
        counts=counts,
        new_id=new_id or counter_ids(),
        now=lambda: 0,
        response_id=response_id,
    )


def chat_translator(
    tools: list[dict[str, Any]] | None = None, *, counts: Counter[str] | None = None, **options: Any
) -> ChatStreamTranslator:
    return ChatStreamTranslator(make_turn(tools, counts=counts, **options), counts)


def translate_sse(translator: StreamReader, data: Iterable[bytes]) -> list[Event]:
    """SSE bytes (in pieces) through an HTTP backend's read path (backends/http/backend.py),
    for a chat or a Responses reader: `[DONE]` is the end-of-stream marker, EOF is finish(),
    data that is not JSON is counted and skipped, and a GatewayError (an error object, a cut,
    the loop guard) ends the stream through the turn's fail()."""
    turn = translator.turn
    decoder = SSEDecoder()
    events = turn.start()

    def handle(payloads: list[bytes]) -> None:
        for payload in payloads:
            if turn.done:
                return
            if payload == b"[DONE]":
                translator.end_of_stream_marker()
                continue
            try:
                chunk = orjson.loads(payload)
            except orjson.JSONDecodeError:
                translator.count_malformed()
                continue
            translator.feed(chunk)

    try:
        for piece in data:
            handle(decoder.feed(piece))
            events.extend(turn.take())
        handle(decoder.finish())
        translator.finish()
        events.extend(turn.take())
    except GatewayError as exc:
        events.extend(turn.fail(exc))
    return events


def sse_of(chunks: Iterable[Any], done: bool = True) -> bytes:
    """Chunk objects as the bytes of an event stream."""
    body = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
    return body + b"data: [DONE]\n\n" if done else body


def fold(translator: ChatStreamTranslator, body: dict[str, Any]) -> list[Event]:
    """A whole non-streamed `chat.completion`, as the backend reads one: one chunk, then the end."""
    turn = translator.turn
    events = turn.start()
    translator.feed(body)
    translator.end_of_stream_marker()
    return events + turn.take()
