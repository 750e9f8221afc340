"""The Chat Completions face (`POST /v1/chat/completions`): a chat body -> the canonical
request (wire/chat.py checks it, translate/chat_face/request.py translates it), and the canonical
events -> chat chunks as Server-Sent Events, or one `chat.completion` body
(translate/chat_face/chunks.py).

Streamed, each chunk is one `data:` line and a success ends with `data: [DONE]`; a failure after
the first byte is an `error` payload, which the official SDKs raise as an APIError. What a chat
client cannot be given is refused before anything is sent (wire/chat.py), and what a backend
cannot carry is refused by the backend (a 400 naming the field).
"""

from __future__ import annotations

from typing import Any

import orjson

from codexgate.backends.base import Inbound, conversation_of
from codexgate.server.delivery import Ask, BodyEncoder, RequestHeaders, StreamEncoder
from codexgate.server.http_errors import openai_shape
from codexgate.translate.chat_face.chunks import ChatChunkEncoder, chat_completion
from codexgate.translate.chat_face.request import parse_chat_request
from codexgate.wire.checks import decode_json_object
from codexgate.wire.responses_events import Event

__all__ = ["ChatFace", "ChatJSON", "ChatSSE"]

_DONE = b"data: [DONE]\n\n"


class ChatSSE(StreamEncoder):
    """A streamed chat answer: chunks as `data:` lines (one encoder per answer: it numbers the
    tool calls and remembers what went out)."""

    def __init__(self, include_usage: bool) -> None:
        self._chunks = ChatChunkEncoder(include_usage=include_usage)

    def batch(self, events: list[Event]) -> bytes:
        chunks = self._chunks.feed(events)
        if not chunks:
            return b""
        return b"".join([b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks])

    def end(self, terminal: Event) -> bytes:
        return _DONE if self._chunks.done_marker_follows else b""


class ChatJSON(BodyEncoder):
    """A non-streamed chat answer: one `chat.completion` (a failure: the error status and body
    the Responses face answers with)."""

    def whole(self, terminal: Event) -> tuple[int, Any]:
        return chat_completion(terminal)


_JSON = ChatJSON()


class ChatFace:
    """`POST /v1/chat/completions`."""

    name = "chat"
    error_shape = staticmethod(openai_shape)

    def read(self, body: bytes, caller: str | None, headers: RequestHeaders = ()) -> Ask:
        """Raises InvalidRequest naming the chat parameter."""
        ask = parse_chat_request(decode_json_object(body, "The request body"))
        req = ask.request
        # A client's own conversation key, scoped to the caller (as the Responses face does):
        # backends that remember conversations between turns key them by it.
        key = req.prompt_cache_key
        conversation = conversation_of(caller, key) if key else None
        encoder = ChatSSE(ask.include_usage) if req.stream else _JSON
        return Ask(req, Inbound(caller, conversation, len(body)), encoder)
