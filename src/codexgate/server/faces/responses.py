"""The Responses face (`POST /v1/responses`): the client's body -> the canonical request, and
canonical events -> SSE bytes or the JSON body of a non-streamed answer.

The canonical model *is* the Responses model, so this face is thin: validation lives in
wire/responses.py, framing in wire/sse.py. It is the place a second face (chat completions,
WebSocket frames) is written next to.
"""

from __future__ import annotations

from typing import Any

from codexgate.wire.responses import ResponsesRequest, decode_json_body, parse_request
from codexgate.wire.responses_events import Event
from codexgate.wire.sse import encode_events

__all__ = ["encode_batch", "final_body", "read_request"]


def read_request(body: bytes) -> ResponsesRequest:
    """The canonical request. Raises InvalidRequest (a 400 naming the field) for a body that
    is not JSON or not a valid Responses request."""
    return parse_request(decode_json_body(body))


def encode_batch(batch: list[Event]) -> bytes:
    """A batch of events as Server-Sent Events, one `event:`/`data:` block each."""
    return encode_events(batch)


def final_body(terminal: Event) -> dict[str, Any]:
    """A non-streamed answer: the response object the terminal event carries."""
    resource: dict[str, Any] = terminal["response"]
    return resource
