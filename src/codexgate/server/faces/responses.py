"""The Responses face (`POST /v1/responses`): the client's body -> the canonical request, and
canonical events -> SSE bytes or the JSON body of a non-streamed answer.

The canonical model *is* the Responses model, so this face is thin: validation lives in
wire/responses.py, framing in wire/sse.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from codexgate.backends.base import Inbound, conversation_of
from codexgate.server.delivery import Ask, BodyEncoder, RequestHeaders, StreamEncoder
from codexgate.server.http_errors import failed_response, openai_shape
from codexgate.server.state import listed_item
from codexgate.translate.compaction import TRIGGER as COMPACTION_TRIGGER
from codexgate.translate.history_memo import Memo
from codexgate.wire.checks import decode_json_object
from codexgate.wire.known_body import KnownBody, cache_key_hint, learn, splice
from codexgate.wire.responses import Item, ResponsesRequest, item_kinds, parse_continued, parse_request
from codexgate.wire.responses_events import FAILED, Event
from codexgate.wire.sse import encode_events

__all__ = ["CompactFace", "Remembered", "RequestReader", "ResponsesFace", "ResponsesJSON", "ResponsesSSE"]


@dataclasses.dataclass(frozen=True, slots=True)
class Remembered:
    """A conversation's last request: as checked, and as bytes where the body was learned
    (wire/known_body.py; None: a WebSocket frame, or a body orjson would write otherwise)."""

    req: ResponsesRequest
    # The `type` of every input item, perhaps more: never fewer (server/state.py relies on it
    # to find item references and compaction items), so it has no default.
    kinds: frozenset[Any]
    body: KnownBody | None = None


class RequestReader:
    """Reads request bodies, remembering each conversation's last request so that the history
    a client re-sends every turn is decoded and validated once (wire/known_body.py `splice`,
    wire/responses.py `parse_continued`).

    A conversation is the client's `prompt_cache_key` (Codex sends its thread id), scoped to
    the caller's API key: one caller's requests never share memory with another's, so timing
    cannot tell a caller what someone else sent. Nothing is trusted from the memory that the
    new body does not repeat exactly; a request without a key is read as it is. A conversation
    is remembered from its second request (Memo.returning)."""

    def __init__(self, memo: Memo[Remembered] | None = None) -> None:
        self._memo = memo

    def read(self, body: bytes, caller: str | None = None) -> tuple[ResponsesRequest, Inbound]:
        """The canonical request and what is known of it. Raises InvalidRequest (a 400 naming
        the field) for a body that is not JSON or not a valid Responses request."""
        memo = self._memo
        hint = cache_key_hint(body) if memo is not None else None
        if memo is not None and hint is not None:
            conversation = conversation_of(caller, hint)
            earlier = memo.get(conversation)
            if earlier is not None and earlier.body is not None:
                spliced = splice(body, earlier.body)
                if spliced is not None and spliced[0].get("prompt_cache_key") == hint:
                    data, _, known = spliced
                    return self._continued(data, caller, len(body), conversation, earlier, known)
        return self.read_object(decode_json_object(body, "The request body"), caller, len(body), body)

    def read_object(
        self, data: dict[str, Any], caller: str | None, size: int, body: bytes | None = None
    ) -> tuple[ResponsesRequest, Inbound]:
        """`read` for a body already decoded (a WebSocket frame) of `size` bytes; `body`: its
        bytes, to learn (see Remembered)."""
        cache_key = data.get("prompt_cache_key")
        memo = self._memo
        if not isinstance(cache_key, str) or not cache_key or memo is None:
            return parse_request(data), Inbound(caller, None, size)
        conversation = conversation_of(caller, cache_key)
        earlier = memo.get(conversation)
        if earlier is None and not memo.returning(conversation):
            return parse_request(data), Inbound(caller, conversation, size)
        return self._continued(data, caller, size, conversation, earlier, None, body)

    def _continued(
        self,
        data: dict[str, Any],
        caller: str | None,
        size: int,
        conversation: str,
        earlier: Remembered | None,
        known: KnownBody | None,
        body: bytes | None = None,
    ) -> tuple[ResponsesRequest, Inbound]:
        """A request of a conversation seen before, checked against its last one and
        remembered (`known`: the body as spliced; else `body` is learned when given)."""
        memo = self._memo
        assert memo is not None
        req, shared = parse_continued(data, earlier.req if earlier is not None else None)
        resumed = earlier if shared else None  # the earlier request whose first items these are
        # The shared items' types are among the last request's: only the new items are read
        # (a remembered conversation's items are cold in the caches when many take turns).
        if resumed is not None:
            kinds = item_kinds(req.input[shared:]) | resumed.kinds
        else:
            kinds = item_kinds(req.input)
        if memo.admits(size):
            if known is None and body is not None and type(req.input) is list:
                known = learn(body, req.input, req.tools)
            memo.put(conversation, Remembered(req, kinds, known), size)
        else:
            memo.drop(conversation)
        prefix = (resumed.req.input, shared) if resumed is not None else None
        return req, Inbound(caller, conversation, size, prefix, kinds)


class ResponsesSSE(StreamEncoder):
    """A streamed answer: each event as one `event:`/`data:` block."""

    def batch(self, events: list[Event]) -> bytes:
        return encode_events(events)


class ResponsesJSON(BodyEncoder):
    """A non-streamed answer: the response object the terminal event carries (a failure: the
    error status and body of server/http_errors.py)."""

    def whole(self, terminal: Event) -> tuple[int, Any]:
        if terminal["type"] == FAILED:
            return failed_response(terminal)
        return 200, terminal["response"]


_SSE = ResponsesSSE()
_JSON = ResponsesJSON()


class ResponsesFace:
    """`POST /v1/responses`."""

    name = "responses"
    error_shape = staticmethod(openai_shape)

    def __init__(self, reader: RequestReader | None = None) -> None:
        self.reader = reader or RequestReader()

    def read(self, body: bytes, caller: str | None, headers: RequestHeaders = ()) -> Ask:
        """Raises InvalidRequest naming the field."""
        req, inbound = self.reader.read(body, caller)
        return Ask(req, inbound, _SSE if req.stream else _JSON)


class CompactJSON(BodyEncoder):
    """`POST /v1/responses/compact`'s answer: the compacted history as a
    `response.compaction` object: the user's own messages, then one compaction item that holds
    the summary of everything else."""

    def __init__(self, kept: list[Item]) -> None:
        self.kept = kept

    def whole(self, terminal: Event) -> tuple[int, Any]:
        if terminal["type"] == FAILED:
            return failed_response(terminal)
        response = terminal["response"]
        return 200, {
            "id": response["id"],
            "object": "response.compaction",
            "created_at": response["created_at"],
            "output": self.kept + list(response["output"]),
            "usage": response.get("usage"),
        }


class CompactFace:
    """`POST /v1/responses/compact` (the Open Responses spec; Codex's older remote compaction):
    the same body as a response, answered by the same compaction turn as a
    `compaction_trigger` item (server/state.py), never streamed."""

    name = "compact"
    error_shape = staticmethod(openai_shape)

    def __init__(self, reader: RequestReader | None = None) -> None:
        self.reader = reader or RequestReader()

    def read(self, body: bytes, caller: str | None, headers: RequestHeaders = ()) -> Ask:
        data = decode_json_object(body, "The request body")
        data.pop("stream", None)
        req, inbound = self.reader.read_object(data, caller, len(body))
        kept = [listed_item(item) for item in req.input if _is_user_message(item)]
        trigger: Item = {"type": COMPACTION_TRIGGER}
        req = dataclasses.replace(req, input=[*req.input, trigger], stream=False, store=False)
        return Ask(req, dataclasses.replace(inbound, known_prefix=None, input_kinds=None), CompactJSON(kept))


def _is_user_message(item: Item) -> bool:
    return item.get("role") == "user" and item.get("type", "message") == "message"
