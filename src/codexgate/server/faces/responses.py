"""The Responses face (`POST /v1/responses`): the client's body -> the canonical request, and
canonical events -> SSE bytes or the JSON body of a non-streamed answer.

The canonical model *is* the Responses model, so this face is thin: validation lives in
wire/responses.py, framing in wire/sse.py.
"""

from __future__ import annotations

from typing import Any

from codexgate.backends.base import Inbound
from codexgate.memo import Memo
from codexgate.server.delivery import Ask, BodyEncoder, StreamEncoder
from codexgate.server.http_errors import failed_response
from codexgate.wire.responses import ResponsesRequest, decode_json_body, parse_continued, parse_request
from codexgate.wire.responses_events import FAILED, Event
from codexgate.wire.sse import encode_events

__all__ = ["RequestReader", "ResponsesFace", "ResponsesJSON", "ResponsesSSE"]


class RequestReader:
    """Reads request bodies, remembering each conversation's last request so that the history
    a client re-sends every turn is validated once (wire/responses.py `parse_continued`).

    A conversation is the client's `prompt_cache_key` (Codex sends its thread id), scoped to
    the caller's API key: one caller's requests never share memory with another's, so timing
    cannot tell a caller what someone else sent. Nothing is trusted from the memory that the
    new body does not repeat exactly; a request without a key is read as it is."""

    def __init__(self, memo: Memo[ResponsesRequest] | None = None) -> None:
        self._memo = memo

    def read(self, body: bytes, caller: str | None = None) -> tuple[ResponsesRequest, Inbound]:
        """The canonical request and what is known of it. Raises InvalidRequest (a 400 naming
        the field) for a body that is not JSON or not a valid Responses request."""
        data = decode_json_body(body)
        cache_key = data.get("prompt_cache_key")
        if not isinstance(cache_key, str) or not cache_key:
            return parse_request(data), Inbound(caller, None, len(body))
        conversation = f"{caller or ''}\x00{cache_key}"
        memo = self._memo
        earlier = memo.get(conversation) if memo is not None else None
        req, known = parse_continued(data, earlier)
        if memo is not None:
            memo.put(conversation, req, len(body))
        prefix = (earlier.input, known) if earlier is not None and known else None
        return req, Inbound(caller, conversation, len(body), prefix)


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

    def __init__(self, reader: RequestReader | None = None) -> None:
        self.reader = reader or RequestReader()

    def read(self, body: bytes, caller: str | None) -> Ask:
        """Raises InvalidRequest naming the field."""
        req, inbound = self.reader.read(body, caller)
        return Ask(req, inbound, _SSE if req.stream else _JSON)
