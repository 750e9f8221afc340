"""The Anthropic Messages face (`POST /v1/messages`, `POST /v1/messages/count_tokens`): a
Messages body -> the canonical request (wire/messages.py checks it,
translate/messages_face/request.py translates it), and the canonical events -> Messages stream
events as Server-Sent Events, or one Messages body (translate/messages_face/events.py).

Streamed, each event is `event: <type>` + `data: <the event>`, the event's own `type` inside
(what the Anthropic SDKs and Claude Code read); a failure after the first byte is `event:
error` with Anthropic's error object, which the SDKs raise as an APIStatusError. While the
upstream is silent the server writes `keepalive()`, a `ping` event. Errors before the first
byte are Anthropic's error bodies too: `anthropic_error` (translate/messages_face/errors.py).

The request's headers matter here as on no other face (`anthropic-version`, `anthropic-beta`,
Claude Code's session header): `read` takes them beside the body.

Claude Code sends the whole conversation every turn: given a memory, the face remembers each
session's last request and reads the next one by what is new (server/faces/messages_reader.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, get_args

import orjson

from codexgate.server.delivery import Ask, BodyEncoder, RequestHeaders, StreamEncoder
from codexgate.server.faces.messages_reader import MessagesReader
from codexgate.translate.history_memo import Memo
from codexgate.translate.messages_face.context_edits import apply_edits, read_edits
from codexgate.translate.messages_face.count_tokens import BYTES_PER_TOKEN, count_tokens
from codexgate.translate.messages_face.errors import anthropic_error
from codexgate.translate.messages_face.events import MessagesEvent, MessagesEventEncoder, messages_body
from codexgate.translate.messages_face.request import MessagesAsk, parse_messages_request
from codexgate.wire.checks import decode_json_object
from codexgate.wire.messages_events import PING, StreamEventType
from codexgate.wire.responses_events import Event

__all__ = ["MessagesFace", "MessagesJSON", "MessagesSSE", "anthropic_error", "frame"]


def _head(kind: str) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: "


# The `event:` line and `data: ` of each event, encoded once rather than per event.
_HEADS = {kind: _head(kind) for kind in get_args(StreamEventType)}
_PING = _HEADS[PING] + orjson.dumps({"type": PING}) + b"\n\n"
_TEXT_DELTA = "response.output_text.delta"
_TEXT_PREFIXES: dict[int, bytes] = {}
_UNASKED = object()  # no item asked about yet (MessagesSSE.batch)


def _text_prefix(index: int) -> bytes:
    """The frame of a text delta in block `index`, up to its text (orjson's compact form)."""
    prefix = _HEADS["content_block_delta"] + (
        b'{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":' % index
    )
    if index < 64:  # an answer's first blocks: enough for nearly all
        _TEXT_PREFIXES[index] = prefix
    return prefix


def frame(event: MessagesEvent) -> bytes:
    """One Messages stream event as an SSE frame."""
    kind = event["type"]
    return (_HEADS.get(kind) or _head(kind)) + orjson.dumps(event) + b"\n\n"


class MessagesSSE(StreamEncoder):
    """A streamed Messages answer (one encoder per answer: it numbers the blocks and remembers
    what went out)."""

    def __init__(
        self,
        model: str,
        *,
        show_thinking: bool = True,
        input_tokens: int = 0,
        applied_edits: list[dict[str, Any]] | None = None,
    ) -> None:
        self._events = MessagesEventEncoder(
            model, show_thinking=show_thinking, input_tokens=input_tokens, applied_edits=applied_edits
        )

    def batch(self, events: list[Event]) -> bytes:
        encoder = self._events
        if len(events) == 1 and events[0]["type"] == _TEXT_DELTA:  # a paced upstream's every batch
            index = encoder.head_text_index(events[0].get("item_id"))
            if index >= 0:
                delta = events[0]["delta"]
                prefix = _TEXT_PREFIXES.get(index) or _text_prefix(index)
                return prefix + orjson.dumps(delta) + b"}}\n\n" if delta else b""
        frames: list[bytes] = []
        waiting: list[Event] = []  # events for the encoder, fed in order before the next delta
        # The item whose deltas go out in the frame `prefix` opens (b"": not the open block's):
        # the open block changes only when the encoder is fed, so a run of deltas asks once.
        item_id: Any = _UNASKED
        prefix = b""
        dumps = orjson.dumps
        for event in events:
            if event["type"] == _TEXT_DELTA:
                # The answer's text deltas, nearly every event: written straight into the open
                # block's frame, byte for byte what the encoder's event would be.
                if waiting:
                    frames += [frame(made) for made in encoder.feed(waiting)]
                    waiting = []
                    item_id = _UNASKED
                key = event.get("item_id")
                if key != item_id:
                    item_id, index = key, encoder.head_text_index(key)
                    prefix = (_TEXT_PREFIXES.get(index) or _text_prefix(index)) if index >= 0 else b""
                if prefix:
                    delta = event["delta"]
                    if delta:
                        frames.append(prefix + dumps(delta) + b"}}\n\n")
                    continue
            waiting.append(event)
        if waiting:
            frames += [frame(made) for made in encoder.feed(waiting)]
        return b"".join(frames)

    # A `ping` event, written while the upstream is silent (a long prefill on a CPU), as
    # Anthropic's API does: proxies and clients that give up on a stream sending nothing keep it.
    keepalive = _PING
    keepalive_seconds = 5.0


class MessagesJSON(BodyEncoder):
    """A non-streamed Messages answer: the message (a failure: Anthropic's error status and body)."""

    def __init__(
        self, model: str, *, show_thinking: bool = True, applied_edits: list[dict[str, Any]] | None = None
    ) -> None:
        self._model = model
        self._show = show_thinking
        self._applied = applied_edits

    def whole(self, terminal: Event) -> tuple[int, Any]:
        return messages_body(terminal, self._model, show_thinking=self._show, applied_edits=self._applied)


class MessagesFace:
    """`POST /v1/messages` and `POST /v1/messages/count_tokens`. `memo`: where each session's
    last request is remembered (None: nothing is), under keys of this face's own."""

    name = "messages"
    error_shape = staticmethod(anthropic_error)

    def __init__(self, memo: Memo[Any] | None = None) -> None:
        self._reader = MessagesReader(memo)

    def read(self, body: bytes, caller: str | None, headers: RequestHeaders = ()) -> Ask:
        """Raises InvalidRequest naming the Messages parameter."""
        return self.read_messages(body, caller, _named(headers))[0]

    def read_messages(
        self, body: bytes, caller: str | None, headers: Mapping[str, str] | None = None
    ) -> tuple[Ask, MessagesAsk]:
        """`read`, and what only this face acts on (the betas, the context management asked
        for, the server tools left out). `headers`: the request's, names in any case."""
        ask, inbound = self._reader.read(body, caller, headers)
        req = ask.request
        # message_start's first estimate (message_delta then carries the upstream's count), and
        # the context edits' trigger: the face's rule, as for usage an upstream does not report.
        estimate = len(body) // BYTES_PER_TOKEN
        # The context edits asked for, on the input every backend but an anthropic upstream
        # reads (that one is sent the body as it came, and edits it itself). What the reader
        # remembers for the next request stays the input as sent.
        edits = read_edits(ask.context_management, ask.model)
        applied: list[dict[str, Any]] = []
        if edits and isinstance(req.input, list):
            edited, applied = apply_edits(req.input, edits, estimate)
            if applied:
                req = dataclasses.replace(req, input=edited)
                inbound = dataclasses.replace(inbound, known_prefix=None)
        encoder: StreamEncoder | BodyEncoder
        if req.stream:
            encoder = MessagesSSE(
                ask.model, show_thinking=ask.shows_thinking, input_tokens=estimate, applied_edits=applied
            )
        else:
            encoder = MessagesJSON(ask.model, show_thinking=ask.shows_thinking, applied_edits=applied)
        return Ask(req, inbound, encoder), ask

    def count_tokens(
        self, body: bytes, headers: Mapping[str, str] | None = None
    ) -> tuple[int, dict[str, int]]:
        """The answer of `/v1/messages/count_tokens`: 200 and `{"input_tokens": N}`. Raises
        InvalidRequest naming the Messages parameter."""
        ask = parse_messages_request(decode_json_object(body, "The request body"), headers, count_tokens=True)
        return 200, count_tokens(ask)


def _named(headers: RequestHeaders) -> dict[str, str]:
    """ASGI's header pairs as a mapping of the ones the face reads (anthropic-*, Claude Code's)."""
    return {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in headers
        if name.startswith((b"anthropic-", b"x-claude-code-"))
    }
