"""The Responses face (`POST /v1/responses`): the client's body -> the canonical request, and
canonical events -> SSE bytes or the JSON body of a non-streamed answer.

The canonical model *is* the Responses model, so this face is thin: validation lives in
wire/responses.py, framing in wire/sse.py. It is the place a second face (chat completions,
WebSocket frames) is written next to.
"""

from __future__ import annotations

from typing import Any

from codexgate.memo import Memo
from codexgate.wire.responses import ResponsesRequest, decode_json_body, parse_request
from codexgate.wire.responses_events import Event
from codexgate.wire.sse import encode_events

__all__ = ["RequestReader", "encode_batch", "final_body"]


class RequestReader:
    """Reads request bodies, remembering each conversation's last request so that the history
    a client re-sends every turn is validated once (wire/responses.py `parse_request`).

    A conversation is the client's `prompt_cache_key` (Codex sends its thread id), scoped to
    the caller's API key: one caller's requests never share memory with another's, so timing
    cannot tell a caller what someone else sent. Nothing is trusted from the memory that the
    new body does not repeat exactly; a request without a key is read as it is."""

    def __init__(self, memo: Memo[ResponsesRequest] | None = None) -> None:
        self._memo = memo

    def read(self, body: bytes, caller: str | None = None) -> ResponsesRequest:
        """The canonical request. Raises InvalidRequest (a 400 naming the field) for a body
        that is not JSON or not a valid Responses request."""
        data = decode_json_body(body)
        memo = self._memo
        cache_key = data.get("prompt_cache_key")
        if memo is None or not isinstance(cache_key, str) or not cache_key:
            return parse_request(data)
        key = f"{caller or ''}\x00{cache_key}"
        req = parse_request(data, memo.get(key))
        req.history_key, req.body_size = key, len(body)
        memo.put(key, req, len(body))
        return req


def encode_batch(batch: list[Event]) -> bytes:
    """A batch of events as Server-Sent Events, one `event:`/`data:` block each."""
    return encode_events(batch)


def final_body(terminal: Event) -> dict[str, Any]:
    """A non-streamed answer: the response object the terminal event carries."""
    resource: dict[str, Any] = terminal["response"]
    return resource
